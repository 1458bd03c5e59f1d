//! Worker-side deduplication: a bounded, persistable set of occurrence ids already performed.
//!
//! The consumer delivers at least once; a worker that checks [`SeenSet::contains`] before an
//! effect and [`SeenSet::insert`]s the id after it performs each effect once per id, as long as a
//! repeat arrives before the id is evicted. The set keeps the `capacity` most recently inserted
//! ids (oldest evicted first). With a consumer that persists progress after every advance (as
//! [`PersistentConsumer`](super::PersistentConsumer) does) and a transport that never delivers a
//! message after its acknowledgement timeout, every repeat of an id arrives while fewer than
//! `2 * max_search_ahead` other ids were inserted since, so `capacity >= 2 * max_search_ahead`
//! suffices. A worker whose effects must survive its own crash persists the set
//! ([`SeenSet::encode`]) atomically with the effects.

use std::collections::{BTreeSet, VecDeque};

use super::codec::{self, CodecError};
use super::id::OccurrenceId;

const FORMAT_VERSION: u8 = 1;

/// Why a seen-set could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeenSetError {
    /// The bytes are not a valid encoding.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The bytes hold more ids than the capacity the caller allows.
    #[error("{len} ids over the capacity of {capacity}")]
    OverCapacity {
        /// Ids in the bytes.
        len: usize,
        /// The caller's capacity.
        capacity: usize,
    },
    /// The bytes list an id twice.
    #[error("id {0} is listed twice")]
    Duplicate(OccurrenceId),
}

/// A bounded set of occurrence ids, evicting the oldest insertion first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenSet {
    capacity: usize,
    ids: BTreeSet<OccurrenceId>,
    /// Insertion order, oldest first.
    order: VecDeque<OccurrenceId>,
}

#[derive(bincode::Encode, bincode::Decode)]
struct Wire {
    version: u8,
    /// Oldest first.
    ids: Vec<OccurrenceId>,
}

impl SeenSet {
    /// An empty set keeping at most `capacity` ids (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ids: BTreeSet::new(),
            order: VecDeque::new(),
        }
    }

    /// The most ids kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of ids kept.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no id is kept.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether `id` was inserted and not yet evicted.
    pub fn contains(&self, id: &OccurrenceId) -> bool {
        self.ids.contains(id)
    }

    /// Inserts `id`; returns `false` if it was already there. When full, evicts the oldest
    /// insertion (traced at `trace` level).
    pub fn insert(&mut self, id: OccurrenceId) -> bool {
        if !self.ids.insert(id) {
            return false;
        }
        self.order.push_back(id);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
                tracing::trace!(id = %old, "seen-set eviction");
            }
        }
        true
    }

    /// The canonical encoding (ids oldest first).
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(&Wire {
            version: FORMAT_VERSION,
            ids: self.order.iter().copied().collect(),
        })
    }

    /// Decodes bytes from [`encode`](Self::encode) into a set of `capacity`.
    pub fn decode(bytes: &[u8], capacity: usize) -> Result<Self, SeenSetError> {
        let wire: Wire = codec::decode(bytes)?;
        if wire.version != FORMAT_VERSION {
            return Err(CodecError::Version {
                found: wire.version,
                expected: FORMAT_VERSION,
            }
            .into());
        }
        let mut set = Self::new(capacity);
        if wire.ids.len() > set.capacity {
            return Err(SeenSetError::OverCapacity {
                len: wire.ids.len(),
                capacity: set.capacity,
            });
        }
        for id in wire.ids {
            if !set.insert(id) {
                return Err(SeenSetError::Duplicate(id));
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Agrees with a naive model (a list of distinct ids, oldest dropped beyond capacity),
        /// and survives an encode/decode round trip at every step.
        #[test]
        fn matches_a_fifo_model(capacity in 1usize..8, ops in prop::collection::vec(0u64..12, 0..60)) {
            let mut set = SeenSet::new(capacity);
            let mut model: Vec<u64> = Vec::new();
            for n in ops {
                let id = OccurrenceId::new(0, n % 3, n);
                let fresh = !model.contains(&n);
                prop_assert_eq!(set.insert(id), fresh);
                if fresh {
                    model.push(n);
                    if model.len() > capacity {
                        model.remove(0);
                    }
                }
                prop_assert_eq!(set.len(), model.len());
                for m in 0..12u64 {
                    prop_assert_eq!(set.contains(&OccurrenceId::new(0, m % 3, m)), model.contains(&m));
                }
                prop_assert_eq!(&SeenSet::decode(&set.encode().unwrap(), capacity).unwrap(), &set);
            }
        }
    }

    #[test]
    fn evicts_oldest_and_round_trips() {
        let id = |n| OccurrenceId::new(1, 0, n);
        let mut s = SeenSet::new(3);
        assert!(s.insert(id(5)));
        assert!(!s.insert(id(5)));
        assert!(s.insert(id(1)));
        assert!(s.insert(id(9)));
        assert!(s.insert(id(2)));
        assert!(
            !s.contains(&id(5)),
            "oldest insertion is evicted, not the smallest id"
        );
        assert!(s.contains(&id(1)) && s.contains(&id(9)) && s.contains(&id(2)));
        let bytes = s.encode().unwrap();
        let back = SeenSet::decode(&bytes, 3).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            SeenSet::decode(&bytes, 2),
            Err(SeenSetError::OverCapacity {
                len: 3,
                capacity: 2
            })
        );
        assert!(SeenSet::decode(&bytes[..bytes.len() - 1], 3).is_err());
        let dup = codec::encode(&Wire {
            version: FORMAT_VERSION,
            ids: vec![id(1), id(1)],
        })
        .unwrap();
        assert_eq!(
            SeenSet::decode(&dup, 3),
            Err(SeenSetError::Duplicate(id(1)))
        );
    }
}
