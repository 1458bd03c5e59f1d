//! A worker's idempotency memory: keyed on (authenticated sender, occurrence id), remembering a
//! digest of what was delivered and the answer given, and forgotten only when the sender's own
//! acknowledged progress passes it.
//!
//! [`SeenSet`](super::SeenSet) evicts its oldest id when it is full, so anyone who can deliver
//! can evict: post `capacity` fresh ids and the next re-delivery of a real one performs its
//! effect twice. [`DedupeTable`] has no such rule. Its entries belong to a sender (the key id the
//! worker authenticated the delivery with, `docs/outbox.md`, "The worker protocol"), and each
//! delivery carries the sender's **acknowledged progress** `p` (the consumer's persisted
//! progress: every record up to `p` is finished, its result durably taken, and the consumer will
//! never deliver it again). [`DedupeTable::acknowledge`] moves the sender's floor to `p` and
//! forgets the sender's entries at or below it; nothing else removes an entry.
//!
//! **Size rule.** A sender's entries all lie in `(floor, floor + window]` (deliveries outside
//! it are refused: [`DedupeVerdict::Stale`] at or below the floor, [`DedupeVerdict::AheadOfWindow`] above),
//! so a sender holds at most `window` entries; with `window` at least the consumer's
//! `max_search_ahead` (the consumer never delivers above `progress + max_search_ahead`) an honest
//! consumer is never refused. At most [`DedupeLimits::max_senders`] senders, and the answers'
//! bytes at most [`DedupeLimits::max_total_bytes`]: a fresh delivery is accepted only when the
//! largest answer it may leave ([`DedupeLimits::max_answer_bytes`]) still fits, so remembering
//! the outcome of an effect once performed never fails.
//!
//! **Digest.** A repeat of `(sender, id)` is answered from memory only when its index and
//! [`delivery_digest`] (handler and payload) are the ones first seen; anything else is a
//! [`DedupeVerdict::Conflict`] (HTTP 409): the same name for another effect is never answered with the
//! first effect's answer, and never performed.
//!
//! Pure: no clock, no I/O. A worker whose memory must survive its own crash persists
//! [`DedupeTable::encode`] atomically with its effects.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::codec::{self, CodecError};
use super::id::OccurrenceId;
use super::workers::AnswerProof;

const FORMAT_VERSION: u8 = 1;

/// Bytes an entry counts besides its answer body (id, index, digest, proof, bookkeeping).
pub const DEDUPE_ENTRY_OVERHEAD_BYTES: usize = 256;

/// Longest sender name kept.
pub const MAX_SENDER_BYTES: usize = 64;

/// `SHA-256(len(handler) as u32 BE ‖ handler ‖ payload)`: what a repeat must match.
pub fn delivery_digest(handler: &str, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(
        u32::try_from(handler.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    h.update(handler.as_bytes());
    h.update(payload);
    h.finalize().into()
}

/// Bounds of a [`DedupeTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupeLimits {
    /// Indices above a sender's acknowledged progress it may have in flight (at least the
    /// consumer's `max_search_ahead`; at least 1).
    pub window: u64,
    /// Most senders remembered (at least 1).
    pub max_senders: usize,
    /// Largest answer remembered; a longer one is remembered as
    /// [`Remembered::TooLarge`] (set it to what the ledger accepts,
    /// [`max_answer_bytes`](super::max_answer_bytes)).
    pub max_answer_bytes: usize,
    /// Most bytes of remembered entries ([`DEDUPE_ENTRY_OVERHEAD_BYTES`] plus the answer each).
    pub max_total_bytes: usize,
}

impl Default for DedupeLimits {
    /// A window of 4,096, 16 senders, 64 KiB answers, 256 MiB in total.
    fn default() -> Self {
        Self {
            window: 4_096,
            max_senders: 16,
            max_answer_bytes: 64 * 1024,
            max_total_bytes: 256 * 1024 * 1024,
        }
    }
}

/// What was remembered of a performed effect.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum Remembered {
    /// The answer and the worker's signature over it (none on an unauthenticated worker).
    Answer {
        /// The answer body.
        body: Vec<u8>,
        /// The worker's signature.
        proof: Option<AnswerProof>,
    },
    /// The effect ran but its answer was longer than [`DedupeLimits::max_answer_bytes`]: the
    /// ledger would refuse it, so it is never answered as done.
    TooLarge {
        /// The answer's length.
        len: u64,
    },
}

/// One remembered delivery.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct DedupeEntry {
    /// The record's outbox index.
    pub index: u64,
    /// [`delivery_digest`] of its handler and payload.
    pub digest: [u8; 32],
    /// What the effect left.
    pub outcome: Remembered,
}

impl DedupeEntry {
    fn bytes(&self) -> usize {
        let body = match &self.outcome {
            Remembered::Answer { body, .. } => body.len(),
            Remembered::TooLarge { .. } => 0,
        };
        DEDUPE_ENTRY_OVERHEAD_BYTES.saturating_add(body)
    }
}

/// Why a delivery may not be performed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DedupeFull {
    /// [`DedupeLimits::max_senders`] other senders are remembered.
    Senders,
    /// The sender already holds `window` entries.
    Window,
    /// The worst-case answer would not fit [`DedupeLimits::max_total_bytes`].
    Bytes,
}

/// What a worker does with a delivery ([`DedupeTable::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DedupeVerdict<'a> {
    /// Never seen: perform the effect, then [`DedupeTable::remember`] its outcome.
    Fresh,
    /// Seen with the same index and digest: answer what was remembered, perform nothing.
    Replay(&'a DedupeEntry),
    /// Seen with another index or digest: refuse (409), perform nothing.
    Conflict {
        /// The index first seen with this id.
        index: u64,
    },
    /// At or below the sender's acknowledged progress: finished by the sender's own account;
    /// refuse (410), perform nothing.
    Stale {
        /// The sender's acknowledged progress.
        progress: u64,
    },
    /// Above the sender's window: refuse for now (503).
    AheadOfWindow {
        /// The sender's acknowledged progress.
        progress: u64,
        /// The window.
        window: u64,
    },
    /// No room: refuse for now (503).
    Full(DedupeFull),
}

/// Why [`DedupeTable::remember`] or [`DedupeTable::acknowledge`] refused, or bytes did not
/// decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DedupeError {
    /// `remember` without a [`DedupeVerdict::Fresh`] for the same delivery first.
    #[error("delivery {id} of {sender:?} is not fresh: check it first")]
    NotFresh {
        /// The sender.
        sender: String,
        /// The id.
        id: OccurrenceId,
    },
    /// A new sender while [`DedupeLimits::max_senders`] are remembered, or a sender name
    /// longer than [`MAX_SENDER_BYTES`].
    #[error("no room for sender {0:?}")]
    Senders(String),
    /// The bytes are not a valid encoding.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The bytes break a bound or an invariant.
    #[error("invalid dedupe table: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SenderMemory {
    progress: u64,
    entries: BTreeMap<OccurrenceId, DedupeEntry>,
    /// `(index, id)` of every entry, for eviction in index order.
    by_index: BTreeSet<(u64, OccurrenceId)>,
}

/// The idempotency memory of a worker (or of the workers of one service): see the module
/// documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupeTable {
    limits: DedupeLimits,
    senders: BTreeMap<String, SenderMemory>,
    bytes: usize,
}

/// One sender in the encoding: `(sender, acknowledged progress, entries by id)`.
type WireSender = (String, u64, Vec<(OccurrenceId, DedupeEntry)>);

#[derive(bincode::Encode, bincode::Decode)]
struct Wire {
    version: u8,
    /// Senders ascending.
    senders: Vec<WireSender>,
}

impl DedupeTable {
    /// An empty table (limits of 0 are raised to 1).
    pub fn new(limits: DedupeLimits) -> Self {
        Self {
            limits: DedupeLimits {
                window: limits.window.max(1),
                max_senders: limits.max_senders.max(1),
                ..limits
            },
            senders: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// The limits.
    pub fn limits(&self) -> DedupeLimits {
        self.limits
    }

    /// Entries remembered, over all senders.
    pub fn len(&self) -> usize {
        self.senders.values().map(|s| s.entries.len()).sum()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.senders.values().all(|s| s.entries.is_empty())
    }

    /// Bytes remembered (see [`DedupeLimits::max_total_bytes`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `sender`'s acknowledged progress (0 for a sender never seen).
    pub fn progress(&self, sender: &str) -> u64 {
        self.senders.get(sender).map_or(0, |s| s.progress)
    }

    /// The entry of `(sender, id)`, if remembered.
    pub fn get(&self, sender: &str, id: &OccurrenceId) -> Option<&DedupeEntry> {
        self.senders.get(sender)?.entries.get(id)
    }

    /// `sender` (authenticated) acknowledges progress `progress`: its floor rises to it (never
    /// falls) and its entries at or below it are forgotten. Returns how many were.
    ///
    /// # Errors
    /// [`DedupeError::Senders`] for a new sender when the table has no room for it.
    pub fn acknowledge(&mut self, sender: &str, progress: u64) -> Result<usize, DedupeError> {
        let limits = self.limits;
        let Some(mem) = self.sender_mut(sender, limits)? else {
            return Ok(0);
        };
        if progress <= mem.progress {
            return Ok(0);
        }
        mem.progress = progress;
        let mut freed = 0usize;
        let mut evicted = 0usize;
        while let Some(&(index, id)) = mem.by_index.first() {
            if index > progress {
                break;
            }
            mem.by_index.pop_first();
            if let Some(e) = mem.entries.remove(&id) {
                freed = freed.saturating_add(e.bytes());
            }
            evicted += 1;
        }
        self.bytes = self.bytes.saturating_sub(freed);
        if evicted > 0 {
            tracing::trace!(sender, progress, evicted, "dedupe entries acknowledged");
        }
        Ok(evicted)
    }

    /// Finds (or, with room, creates) `sender`'s memory. `None`: a new sender whose progress
    /// is 0, left uncreated (nothing to record yet).
    fn sender_mut(
        &mut self,
        sender: &str,
        limits: DedupeLimits,
    ) -> Result<Option<&mut SenderMemory>, DedupeError> {
        if !self.senders.contains_key(sender) {
            if sender.len() > MAX_SENDER_BYTES || self.senders.len() >= limits.max_senders {
                return Err(DedupeError::Senders(sender.chars().take(64).collect()));
            }
            self.senders
                .insert(sender.to_string(), SenderMemory::default());
        }
        Ok(self.senders.get_mut(sender))
    }

    /// What to do with `sender`'s delivery of record `index`, occurrence `id`, whose handler
    /// and payload have [`delivery_digest`] `digest`. Call [`acknowledge`](Self::acknowledge)
    /// with the delivery's progress first.
    pub fn check(
        &self,
        sender: &str,
        index: u64,
        id: &OccurrenceId,
        digest: &[u8; 32],
    ) -> DedupeVerdict<'_> {
        let mem = self.senders.get(sender);
        let progress = mem.map_or(0, |m| m.progress);
        if let Some(e) = mem.and_then(|m| m.entries.get(id)) {
            return if e.index == index && &e.digest == digest {
                DedupeVerdict::Replay(e)
            } else {
                DedupeVerdict::Conflict { index: e.index }
            };
        }
        if index <= progress {
            return DedupeVerdict::Stale { progress };
        }
        if index > progress.saturating_add(self.limits.window) {
            return DedupeVerdict::AheadOfWindow {
                progress,
                window: self.limits.window,
            };
        }
        match mem {
            None if sender.len() > MAX_SENDER_BYTES
                || self.senders.len() >= self.limits.max_senders =>
            {
                return DedupeVerdict::Full(DedupeFull::Senders);
            }
            Some(m) if m.entries.len() as u64 >= self.limits.window => {
                return DedupeVerdict::Full(DedupeFull::Window);
            }
            _ => {}
        }
        let worst = DEDUPE_ENTRY_OVERHEAD_BYTES.saturating_add(self.limits.max_answer_bytes);
        if self.bytes.saturating_add(worst) > self.limits.max_total_bytes {
            return DedupeVerdict::Full(DedupeFull::Bytes);
        }
        DedupeVerdict::Fresh
    }

    /// Remembers the outcome of a performed effect. An answer longer than
    /// [`DedupeLimits::max_answer_bytes`] is remembered as [`Remembered::TooLarge`]. Returns
    /// what was remembered.
    ///
    /// # Errors
    /// [`DedupeError::NotFresh`] when [`check`](Self::check) would not say
    /// [`DedupeVerdict::Fresh`] for it (the caller holds the table's lock from `check` to here, so
    /// this does not happen), [`DedupeError::Senders`].
    pub fn remember(
        &mut self,
        sender: &str,
        id: OccurrenceId,
        index: u64,
        digest: [u8; 32],
        outcome: Remembered,
    ) -> Result<&DedupeEntry, DedupeError> {
        if self.check(sender, index, &id, &digest) != DedupeVerdict::Fresh {
            return Err(DedupeError::NotFresh {
                sender: sender.chars().take(64).collect(),
                id,
            });
        }
        let outcome = match outcome {
            Remembered::Answer { body, .. } if body.len() > self.limits.max_answer_bytes => {
                Remembered::TooLarge {
                    len: body.len() as u64,
                }
            }
            o => o,
        };
        let entry = DedupeEntry {
            index,
            digest,
            outcome,
        };
        let limits = self.limits;
        self.bytes = self.bytes.saturating_add(entry.bytes());
        let mem = self
            .sender_mut(sender, limits)?
            .ok_or_else(|| DedupeError::Senders(sender.into()))?;
        mem.by_index.insert((index, id));
        Ok(mem.entries.entry(id).or_insert(entry))
    }

    /// The canonical encoding (for a worker persisting its memory with its effects).
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(&Wire {
            version: FORMAT_VERSION,
            senders: self
                .senders
                .iter()
                .map(|(name, m)| {
                    (
                        name.clone(),
                        m.progress,
                        m.entries.iter().map(|(id, e)| (*id, e.clone())).collect(),
                    )
                })
                .collect(),
        })
    }

    /// Decodes [`encode`](Self::encode)'s bytes into a table of `limits`, checking every bound
    /// and invariant.
    pub fn decode(bytes: &[u8], limits: DedupeLimits) -> Result<Self, DedupeError> {
        let wire: Wire = codec::decode(bytes)?;
        if wire.version != FORMAT_VERSION {
            return Err(CodecError::Version {
                found: wire.version,
                expected: FORMAT_VERSION,
            }
            .into());
        }
        let mut t = Self::new(limits);
        if wire.senders.len() > t.limits.max_senders {
            return Err(DedupeError::Invalid(format!(
                "{} senders over the limit",
                wire.senders.len()
            )));
        }
        for (name, progress, entries) in wire.senders {
            if t.senders.contains_key(&name) {
                return Err(DedupeError::Invalid(format!(
                    "sender {name:?} listed twice"
                )));
            }
            t.acknowledge(&name, progress)?;
            for (id, e) in entries {
                if e.index <= progress || e.index > progress.saturating_add(t.limits.window) {
                    return Err(DedupeError::Invalid(format!(
                        "entry {id} at index {} outside the window",
                        e.index
                    )));
                }
                if t.bytes.saturating_add(e.bytes()) > t.limits.max_total_bytes {
                    return Err(DedupeError::Invalid("over the byte limit".into()));
                }
                let mem = t
                    .senders
                    .get_mut(&name)
                    .ok_or_else(|| DedupeError::Invalid("sender vanished".into()))?;
                if mem.entries.len() as u64 >= t.limits.window {
                    return Err(DedupeError::Invalid("more entries than the window".into()));
                }
                t.bytes = t.bytes.saturating_add(e.bytes());
                mem.by_index.insert((e.index, id));
                if mem.entries.insert(id, e).is_some() {
                    return Err(DedupeError::Invalid(format!("id {id} listed twice")));
                }
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(window: u64) -> DedupeLimits {
        DedupeLimits {
            window,
            max_senders: 2,
            max_answer_bytes: 16,
            max_total_bytes: 4 * (DEDUPE_ENTRY_OVERHEAD_BYTES + 16),
        }
    }

    fn answer(b: &[u8]) -> Remembered {
        Remembered::Answer {
            body: b.to_vec(),
            proof: None,
        }
    }

    fn id(n: u64) -> OccurrenceId {
        OccurrenceId::new(1, 2, n)
    }

    #[test]
    fn repeats_replay_conflicts_refuse_and_only_progress_evicts() {
        let mut t = DedupeTable::new(limits(3));
        let d = delivery_digest("mail", b"to=ops");
        assert_eq!(t.check("c", 1, &id(1), &d), DedupeVerdict::Fresh);
        t.remember("c", id(1), 1, d, answer(b"sent")).unwrap();
        assert!(
            matches!(t.check("c", 1, &id(1), &d), DedupeVerdict::Replay(e) if e.outcome == answer(b"sent"))
        );
        // The same id with another payload, handler or index: a conflict, never a replay.
        let other = delivery_digest("mail", b"to=evil");
        assert_eq!(
            t.check("c", 1, &id(1), &other),
            DedupeVerdict::Conflict { index: 1 }
        );
        assert_eq!(
            t.check("c", 1, &id(1), &delivery_digest("sms", b"to=ops")),
            DedupeVerdict::Conflict { index: 1 }
        );
        assert_eq!(
            t.check("c", 2, &id(1), &d),
            DedupeVerdict::Conflict { index: 1 }
        );
        // Another sender's namespace is its own.
        assert_eq!(t.check("d", 1, &id(1), &other), DedupeVerdict::Fresh);
        // The window: (progress, progress + 3].
        assert_eq!(
            t.check("c", 4, &id(4), &d),
            DedupeVerdict::AheadOfWindow {
                progress: 0,
                window: 3
            }
        );
        t.remember("c", id(3), 3, d, answer(b"x")).unwrap();
        // Outsiders cannot evict: the only eviction is the sender's acknowledged progress.
        assert_eq!(t.acknowledge("c", 2), Ok(1));
        assert_eq!(
            t.check("c", 1, &id(1), &d),
            DedupeVerdict::Stale { progress: 2 }
        );
        assert!(matches!(
            t.check("c", 3, &id(3), &d),
            DedupeVerdict::Replay(_)
        ));
        assert_eq!(t.check("c", 5, &id(5), &d), DedupeVerdict::Fresh);
        // Progress never falls.
        assert_eq!(t.acknowledge("c", 1), Ok(0));
        assert_eq!(t.progress("c"), 2);
        // Remembering what is not fresh is refused.
        assert!(matches!(
            t.remember("c", id(3), 3, d, answer(b"y")),
            Err(DedupeError::NotFresh { .. })
        ));
    }

    #[test]
    fn bounds_refuse_before_an_effect_and_oversized_answers_are_remembered_as_such() {
        let mut t = DedupeTable::new(limits(100));
        let d = delivery_digest("h", b"p");
        t.remember("a", id(1), 1, d, answer(&[0; 17])).unwrap();
        assert_eq!(
            t.get("a", &id(1)).unwrap().outcome,
            Remembered::TooLarge { len: 17 }
        );
        t.remember("b", id(1), 1, d, answer(b"ok")).unwrap();
        assert_eq!(
            t.check("c", 1, &id(1), &d),
            DedupeVerdict::Full(DedupeFull::Senders)
        );
        assert!(t.acknowledge("c", 5).is_err());
        t.remember("a", id(2), 2, d, answer(b"ok")).unwrap();
        t.remember("a", id(3), 3, d, answer(b"ok")).unwrap();
        assert_eq!(
            t.check("a", 4, &id(4), &d),
            DedupeVerdict::Full(DedupeFull::Bytes)
        );
        t.acknowledge("a", 1).unwrap();
        assert_eq!(t.check("a", 4, &id(4), &d), DedupeVerdict::Fresh);
        let mut w = DedupeTable::new(DedupeLimits {
            window: 2,
            ..DedupeLimits::default()
        });
        w.remember("a", id(1), 1, d, answer(b"")).unwrap();
        // Two ids claiming one index fill the window without widening it.
        w.remember("a", id(9), 1, d, answer(b"")).unwrap();
        assert_eq!(
            w.check("a", 2, &id(2), &d),
            DedupeVerdict::Full(DedupeFull::Window)
        );
    }

    #[test]
    fn encoding_round_trips_and_is_checked() {
        let mut t = DedupeTable::new(limits(10));
        let d = delivery_digest("h", b"p");
        t.remember("a", id(3), 3, d, answer(b"ok")).unwrap();
        t.acknowledge("b", 7).unwrap();
        t.remember("b", id(8), 8, d, answer(&[1; 20])).unwrap();
        let bytes = t.encode().unwrap();
        assert_eq!(DedupeTable::decode(&bytes, limits(10)).unwrap(), t);
        // A smaller window refuses entries outside it; trailing bytes are refused.
        let tight = DedupeLimits {
            window: 1,
            ..limits(10)
        };
        assert!(DedupeTable::decode(&bytes, tight).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(DedupeTable::decode(&long, limits(10)).is_err());
        for cut in 0..bytes.len() {
            assert!(DedupeTable::decode(&bytes[..cut], limits(10)).is_err());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// An honest sender whose window is at least the table's, interleaved with a hostile
        /// sender flooding fresh ids: every repeat of the honest sender's unfinished records
        /// is answered from memory (never performed twice), whatever the flood did.
        #[test]
        fn a_flood_never_evicts_another_senders_entries(
            ops in prop::collection::vec((0u8..4, 0u64..40), 1..200)
        ) {
            let mut t = DedupeTable::new(DedupeLimits {
                window: 8,
                max_senders: 4,
                max_answer_bytes: 8,
                max_total_bytes: usize::MAX,
            });
            let d = delivery_digest("h", b"p");
            let mut progress = 0u64;
            let mut performed: BTreeMap<u64, u32> = BTreeMap::new();
            let mut flood = 0u64;
            for (op, n) in ops {
                match op {
                    // The honest consumer delivers a record in its window (maybe again).
                    0 | 1 => {
                        let index = progress + 1 + n % 8;
                        match t.check("honest", index, &id(index), &d) {
                            DedupeVerdict::Fresh => {
                                *performed.entry(index).or_default() += 1;
                                t.remember("honest", id(index), index, d, answer(b"ok")).unwrap();
                            }
                            DedupeVerdict::Replay(_) => {}
                            v => prop_assert!(false, "honest delivery refused: {v:?}"),
                        }
                    }
                    // It acknowledges progress over records it finished.
                    2 => {
                        let next = progress + 1;
                        if performed.contains_key(&next) {
                            progress = next;
                            t.acknowledge("honest", progress).unwrap();
                        }
                    }
                    // The flood: fresh ids under its own name, with its own progress.
                    _ => {
                        for _ in 0..n {
                            flood += 1;
                            let _ = t.acknowledge("flood", flood.saturating_sub(4));
                            if t.check("flood", flood, &id(1_000_000 + flood), &d) == DedupeVerdict::Fresh {
                                t.remember("flood", id(1_000_000 + flood), flood, d, answer(b"x")).unwrap();
                            }
                        }
                    }
                }
                prop_assert!(performed.values().all(|&c| c == 1), "{performed:?}");
                prop_assert!(t.len() <= 2 * 8);
            }
        }
    }
}
