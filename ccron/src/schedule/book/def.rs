//! [`Def`]: a stored schedule's definition, a [`NewSchedule`] whose handler name is shared
//! ([`HandlerNames`]) instead of owned by each record.
//!
//! Why. A book of 10^6 schedules names a handful of handlers. With a `String` per record, a
//! tick running 10^4 one-shots frees 10^4 small heap blocks (the allocator then merges them
//! with their neighbours: cache misses all over the heap) and its read-ahead waits on a third
//! dependent miss per run (the name's bytes). Here every record naming a handler holds the
//! same `Arc<str>`: a run's record drops a reference, nothing is freed, and the name's bytes
//! stay in the cache.
//!
//! Stored bytes. `Arc<str>` encodes as `str`, exactly as `String` does, and [`Def`]'s fields
//! are [`NewSchedule`]'s in the same order: a record's encoding is unchanged (tested below
//! against [`NewSchedule`]'s on arbitrary definitions).
//!
//! Determinism. The shared names are local memory: which `Arc` a record holds never reaches
//! replicated state (equality, encoding and every comparison read the name's bytes).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Misfire, NewSchedule, Timing};

/// A stored schedule's definition (see the module documentation): [`NewSchedule`]'s fields,
/// in its order, with the handler name shared.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct Def {
    pub key: Option<String>,
    pub handler: Arc<str>,
    pub timing: Timing,
    pub misfire: Misfire,
    pub priority: u8,
    pub jitter_ms: u32,
    pub payload: Vec<u8>,
    pub topic: Option<String>,
    pub kind: Option<String>,
}

/// Builds a `$to` ([`Def`] or [`NewSchedule`]) from `$from` (the other one): the handler
/// name made by `$handler` from the source's, every other field moved (`move`) or cloned
/// (`clone`). The two types have the same fields, listed here once for both conversions.
macro_rules! convert {
    ($from:expr => $to:ident, $handler:expr, $mode:ident) => {{
        let from = $from;
        $to {
            handler: $handler(&from.handler),
            key: convert!(@$mode from.key),
            timing: convert!(@$mode from.timing),
            misfire: from.misfire,
            priority: from.priority,
            jitter_ms: from.jitter_ms,
            payload: convert!(@$mode from.payload),
            topic: convert!(@$mode from.topic),
            kind: convert!(@$mode from.kind),
        }
    }};
    (@move $field:expr) => {
        $field
    };
    (@clone $field:expr) => {
        $field.clone()
    };
}

impl Def {
    /// `def` stored, its handler name taken from `names`.
    pub fn new(def: NewSchedule, names: &mut HandlerNames) -> Self {
        convert!(def => Self, |h: &String| names.intern(h), move)
    }

    /// The definition as requested (a copy).
    pub fn to_schedule(&self) -> NewSchedule {
        convert!(self => NewSchedule, |h: &Arc<str>| h.to_string(), clone)
    }
}

/// What the stored size of a definition depends on: its encoding (the same for [`Def`] and
/// [`NewSchedule`]) and whether it is a one-shot.
pub(super) trait Stored: bincode::Encode {
    /// Its timing.
    fn timing(&self) -> &Timing;
}

impl Stored for NewSchedule {
    fn timing(&self) -> &Timing {
        &self.timing
    }
}

impl Stored for Def {
    fn timing(&self) -> &Timing {
        &self.timing
    }
}

/// The handler names the book's records hold, each once (local memory, not replicated).
#[derive(Debug, Clone, Default)]
pub(super) struct HandlerNames {
    names: BTreeSet<Arc<str>>,
}

impl HandlerNames {
    /// The shared copy of `name` (made on first use).
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.names.get(name) {
            return Arc::clone(n);
        }
        let n: Arc<str> = Arc::from(name);
        self.names.insert(Arc::clone(&n));
        n
    }

    /// Forgets the names no record holds any more (only this table's reference is left).
    pub fn prune(&mut self) {
        self.names.retain(|n| Arc::strong_count(n) > 1);
    }

    /// How many names are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;
    use crate::due::Due;
    use proptest::prelude::*;

    fn schedule() -> impl Strategy<Value = NewSchedule> {
        (
            proptest::option::of("[a-z]{0,12}"),
            "[a-zA-Z_.]{0,40}",
            prop_oneof![
                any::<i64>().prop_map(|t| Timing::At(Due::Time(t))),
                any::<u64>().prop_map(|s| Timing::At(Due::Seq(s))),
                (any::<i64>(), 1i64..1_000_000).prop_map(|(s, p)| Timing::Every {
                    period_ms: p,
                    start_ms: Some(s),
                }),
                (any::<i64>(), any::<u64>())
                    .prop_map(|(at_ms, seq)| Timing::AtOrSeq { at_ms, seq }),
                ("[0-9 */,-]{1,20}", proptest::option::of("[A-Za-z/_]{1,20}"))
                    .prop_map(|(expression, zone)| Timing::Cron { expression, zone }),
            ],
            any::<u8>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::option::of("[!-~]{1,10}"),
            proptest::option::of("[!-~]{1,10}"),
            any::<bool>(),
        )
            .prop_map(
                |(key, handler, timing, priority, jitter_ms, payload, topic, kind, skip)| {
                    let mut s = NewSchedule::new(handler, timing)
                        .with_priority(priority)
                        .with_misfire(if skip {
                            Misfire::Skip
                        } else {
                            Misfire::default()
                        });
                    s.key = key;
                    s.jitter_ms = jitter_ms;
                    s.payload = payload;
                    s.topic = topic;
                    s.kind = kind;
                    s
                },
            )
    }

    proptest! {
        /// A stored definition encodes to the bytes of the definition as requested, decodes
        /// back to it, and converts back to it.
        #[test]
        fn encodes_as_the_requested_schedule(s in schedule()) {
            let mut names = HandlerNames::default();
            let def = Def::new(s.clone(), &mut names);
            let bytes = codec::to_blob(&def).unwrap();
            prop_assert_eq!(&bytes, &codec::to_blob(&s).unwrap());
            prop_assert_eq!(codec::encoded_len(&def).unwrap(), codec::encoded_len(&s).unwrap());
            prop_assert_eq!(codec::from_blob::<NewSchedule>(&bytes).unwrap(), s.clone());
            prop_assert_eq!(codec::from_blob::<Def>(&bytes).unwrap(), def.clone());
            prop_assert_eq!(def.to_schedule(), s);
        }
    }

    #[test]
    fn names_are_shared_and_pruned_when_unused() {
        let mut names = HandlerNames::default();
        let a = Def::new(NewSchedule::new("h", Timing::At(Due::Seq(1))), &mut names);
        let b = Def::new(NewSchedule::new("h", Timing::At(Due::Seq(2))), &mut names);
        let c = Def::new(NewSchedule::new("g", Timing::At(Due::Seq(3))), &mut names);
        assert!(Arc::ptr_eq(&a.handler, &b.handler));
        assert_eq!(names.len(), 2);
        drop(c);
        names.prune();
        assert_eq!(names.len(), 1, "g is held by no record");
        drop((a, b));
        names.prune();
        assert_eq!(names.len(), 0);
    }
}
