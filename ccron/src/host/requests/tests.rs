//! Tests of the executed-requests table: admission, eviction, codec and migrations.

use super::codec::*;
use super::*;
use crate::host::wire;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// Client `n`: an id ordered like `n` (its last 8 bytes, big-endian), legacy prefix 0.
fn c(n: u64) -> ClientId {
    let mut b = [0u8; 32];
    b[24..].copy_from_slice(&n.to_be_bytes());
    ClientId(b)
}

#[test]
fn each_number_executes_once_in_any_order_inside_the_window() {
    let mut e = ExecutedRequests::new();
    assert_eq!(e.admit(c(7), 5, None), Ok(()));
    assert_eq!(
        e.admit(c(7), 5, None),
        Err(DuplicateRequest::Executed {
            client: c(7),
            number: 5
        })
    );
    assert_eq!(e.admit(c(7), 3, None), Ok(()));
    assert_eq!(e.admit(c(7), 9, None), Ok(()));
    assert_eq!(
        e.check(c(7), 3, None),
        Err(DuplicateRequest::Executed {
            client: c(7),
            number: 3
        })
    );
    assert_eq!(e.admit(c(7), 4, None), Ok(()));
    assert_eq!(
        e.admit(c(8), 5, None),
        Ok(()),
        "another client has its own numbers"
    );
    assert_eq!(e.admit(c(7), 9 + REQUEST_WINDOW, None), Ok(()));
    assert_eq!(
        e.admit(c(7), 9, None),
        Err(DuplicateRequest::TooOld {
            client: c(7),
            number: 9,
            highest: 9 + REQUEST_WINDOW
        })
    );
    assert_eq!(
        e.admit(c(7), 10, None),
        Ok(()),
        "the lowest number inside the window"
    );
    assert_eq!(
        e.admit(c(7), 10, None),
        Err(DuplicateRequest::Executed {
            client: c(7),
            number: 10
        })
    );
    assert!(e.settled(c(7), 10) && e.settled(c(7), 9) && !e.settled(c(7), 11));
    assert_eq!(e.clients(), 2);
}

#[test]
fn numbers_above_the_ceiling_are_refused_counted_and_change_nothing() {
    let mut e = ExecutedRequests::new();
    // A client never seen: numbers below AHEAD_WINDOW (base 0).
    let first = e.ceiling(c(1), None);
    assert_eq!(first, AHEAD_WINDOW - 1);
    for n in [u64::MAX, u64::MAX - 1, AHEAD_WINDOW] {
        assert_eq!(
            e.admit(c(1), n, None),
            Err(DuplicateRequest::AheadOfWindow {
                client: c(1),
                number: n,
                ceiling: first
            })
        );
    }
    assert_eq!((e.refused_ahead(), e.clients()), (3, 0));
    assert!(
        !e.settled(c(1), u64::MAX),
        "ahead is not settled: it may fit later"
    );
    assert_eq!(e.admit(c(1), AHEAD_WINDOW - 1, None), Ok(()));
    // Above its highest: AHEAD_WINDOW more.
    assert_eq!(e.ceiling(c(1), None), 2 * AHEAD_WINDOW - 1);
    assert!(e.admit(c(1), 2 * AHEAD_WINDOW, None).is_err());
    assert_eq!(e.admit(c(1), 2 * AHEAD_WINDOW - 1, None), Ok(()));
    assert_eq!(e.refused_ahead(), 4);
    // A clock-numbered client (Unix ms or µs) fits under the agreed time's bound.
    let now: Millis = 1_800_000_000_000;
    let micros = now as u64 * 1_000;
    assert_eq!(e.ceiling(c(2), Some(now)), micros + CLOCK_SLACK_US);
    assert_eq!(e.admit(c(2), now as u64, Some(now)), Ok(()));
    assert_eq!(e.admit(c(3), micros + 5, Some(now)), Ok(()));
    assert_eq!(
        e.admit(c(2), now as u64 + 86_400_000, Some(now + 86_400_000)),
        Ok(())
    );
    assert!(matches!(
        e.admit(c(4), micros + CLOCK_SLACK_US + 1, Some(now)),
        Err(DuplicateRequest::AheadOfWindow { .. })
    ));
    // Without time (or before the epoch), only the history bound.
    assert_eq!(e.ceiling(c(9), Some(-5)), AHEAD_WINDOW - 1);
    let bytes = e.encode().unwrap();
    let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
    assert_eq!((back.refused_ahead(), back.digest()), (5, e.digest()));
}

/// The defect of layout 3 (issue 24, item 4): a client numbering `u64::MAX - 1`, once
/// evicted, raised the replicated floor to `u64::MAX` for every client entering the table
/// afterwards. Now its eviction leaves only its own watermark.
#[test]
fn an_evicted_hostile_client_raises_nobody_elses_floor() {
    let now = Some(0x7fff_ffff_ffff_ffff);
    let mut e = ExecutedRequests::with_max_clients(2);
    assert_eq!(e.admit(c(666), u64::MAX - 1, now), Ok(()));
    assert_eq!(e.admit(c(1), 1, now), Ok(()));
    assert_eq!(e.admit(c(2), 1, now), Ok(()), "evicts the hostile client");
    assert_eq!((e.evicted(), e.watermarks(), e.floor()), (1, 1, 0));
    for k in 3..50 {
        for n in 1..4 {
            assert_eq!(e.admit(c(k), n, now), Ok(()), "client {k} number {n}");
        }
    }
    // The hostile client itself: at most u64::MAX, once.
    assert!(matches!(
        e.admit(c(666), u64::MAX - 1, now),
        Err(DuplicateRequest::BelowFloor { .. })
    ));
    assert_eq!(e.admit(c(666), u64::MAX, now), Ok(()));
    assert!(e.admit(c(666), u64::MAX, now).is_err());
}

#[test]
fn an_evicted_client_comes_back_above_its_watermark_only() {
    let mut e = ExecutedRequests::with_max_clients(2);
    e.admit(c(1), 10, None).unwrap();
    e.admit(c(1), 8, None).unwrap(); // 9 never executed
    e.admit(c(2), 20, None).unwrap();
    e.admit(c(2), 21, None).unwrap();
    e.admit(c(3), 5, None).unwrap(); // evicts client 1 (watermark 10)
    assert_eq!(
        (e.clients(), e.watermarks(), e.next_fresh(c(1))),
        (2, 1, 11)
    );
    for n in [1, 9, 10] {
        assert_eq!(
            e.admit(c(1), n, None),
            Err(DuplicateRequest::BelowFloor {
                client: c(1),
                number: n,
                floor: 11
            })
        );
    }
    // New clients are not affected: they start wherever they like below the ceiling.
    assert_eq!(e.check(c(4), 0, None), Ok(()));
    assert_eq!(e.admit(c(1), 12, None), Ok(()), "back: evicts client 2");
    assert_eq!(e.next_fresh(c(2)), 22);
    // Back in the table, its window still refuses everything up to the watermark.
    for n in [8, 9, 10] {
        assert_eq!(
            e.admit(c(1), n, None),
            Err(DuplicateRequest::Executed {
                client: c(1),
                number: n
            })
        );
    }
    assert_eq!(e.admit(c(1), 11, None), Ok(()));
    let bytes = e.encode().unwrap();
    let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.digest(), e.digest());
}

#[test]
fn encoding_round_trips_and_refuses_bad_entries() {
    let mut e = ExecutedRequests::with_max_clients(3);
    for (k, n) in [(1, 3), (1, 1), (2, 100), (9, 0), (4, 7)] {
        e.admit(c(k), n, None).unwrap();
    }
    let bytes = e.encode().unwrap();
    let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.digest(), e.digest());
    assert_ne!(ExecutedRequests::new().digest(), e.digest());
    assert!(ExecutedRequests::decode(&bytes, bytes.len() - 1).is_err());
    let head = (10u64, 0u64, 5u64, 0u64, 0u64);
    let enc = |entries: Vec<(u64, u64, [u64; 4], u64)>,
               marks: Vec<(u64, u64)>,
               legacy: Vec<(u64, u64)>| {
        let entries = entries
            .into_iter()
            .map(|(k, h, m, u)| (c(k), h, m, u))
            .collect();
        let marks = marks.into_iter().map(|(k, w)| (c(k), w)).collect();
        let v: Encoded = (head, entries, marks, legacy);
        wire::encode(&v).unwrap()
    };
    let one = [1u64, 0, 0, 0];
    let cases = [
        (vec![(2, 1, one, 1), (1, 1, one, 2)], vec![], vec![]),
        (vec![(2, 1, [2, 0, 0, 0], 1)], vec![], vec![]),
        (vec![(1, 1, one, 1), (2, 1, one, 1)], vec![], vec![]),
        (vec![(1, 1, one, 6)], vec![], vec![]),
        (vec![(1, 1, one, 1)], vec![(1, 5)], vec![]),
        (vec![], vec![(3, 5), (2, 5)], vec![]),
        (vec![], vec![], vec![(3, 5), (2, 5)]),
        (vec![], vec![], vec![(3, 5), (3, 6)]),
    ];
    for (entries, marks, legacy) in cases {
        assert!(ExecutedRequests::decode(&enc(entries, marks, legacy), 1_000).is_err());
    }
    let over: Encoded = (
        (1, 0, 5, 0, 0),
        vec![(c(1), 1, one, 1), (c(2), 1, one, 2)],
        vec![],
        vec![],
    );
    assert!(ExecutedRequests::decode(&wire::encode(&over).unwrap(), 1_000).is_err());
    let ok = enc(
        vec![(1, 1, one, 1), (2, 1, one, 2)],
        vec![(3, 9)],
        vec![(7, 4)],
    );
    let ok = ExecutedRequests::decode(&ok, 1_000).unwrap();
    assert_eq!(
        (ok.clients(), ok.watermarks(), ok.next_fresh(c(3))),
        (2, 1, 10)
    );
}

/// A client whose id starts with the 64-bit id `old` (its legacy prefix), `tail` after.
fn with_prefix(old: u64, tail: u8) -> ClientId {
    let mut b = [tail; 32];
    b[..8].copy_from_slice(&old.to_le_bytes());
    ClientId(b)
}

#[test]
fn a_layout_3_table_migrates_its_floors() {
    // Layout 3: floor 21 (client 2 evicted at 20), client 3 entered at floor 21 and executed
    // 30 and 25; client 1 entered at floor 0 and executed 11 (64-bit ids).
    type Legacy = ((u64, u64, u64, u64), Vec<(u64, u64, [u64; 4], u64, u64)>);
    let m30 = {
        let mut m = Mask::default();
        m.set(0);
        m.set(5);
        m.0
    };
    let legacy: Legacy = (
        (2, 21, 4, 1),
        vec![(1, 11, [1, 0, 0, 0], 3, 0), (3, 30, m30, 4, 21)],
    );
    let bytes = wire::encode(&legacy).unwrap();
    let mut e = ExecutedRequests::decode_legacy(&bytes, bytes.len()).unwrap();
    assert_eq!(
        (e.floor(), e.clients(), e.evicted(), e.legacy_watermarks()),
        (21, 0, 1, 2)
    );
    // Clients 1 and 3 (by every full id starting with their old id) keep their old
    // history as a watermark at their highest number.
    for tail in [0, 0xee] {
        let three = with_prefix(3, tail);
        assert!(matches!(
            e.check(three, 30, None),
            Err(DuplicateRequest::BelowFloor { floor: 31, .. })
        ));
        assert!(e.check(three, 21, None).is_err());
        assert_eq!(e.check(three, 31, None), Ok(()));
        assert!(e.check(with_prefix(1, tail), 11, None).is_err());
        assert_eq!(e.check(with_prefix(1, tail), 12, None), Ok(()));
    }
    // Client 2 (evicted before the migration) cannot replay: the base is its old floor.
    assert!(matches!(
        e.check(with_prefix(2, 0), 20, None),
        Err(DuplicateRequest::BelowFloor { floor: 21, .. })
    ));
    // A key not starting with an old id is a new client at the base.
    assert_eq!(e.check(with_prefix(4, 0), 21, None), Ok(()));
    // Evictions from now on leave the base where it is; a legacy watermark stays after its
    // client executed (no replay of its old numbers, whoever shares its prefix).
    e.admit(with_prefix(3, 0), 31, None).unwrap();
    e.admit(with_prefix(5, 0), 21 + 1_000, None).unwrap();
    e.admit(with_prefix(6, 0), 21 + 1_000, None).unwrap();
    assert_eq!(
        (e.floor(), e.watermarks(), e.legacy_watermarks()),
        (21, 1, 2)
    );
    assert!(e.check(with_prefix(3, 7), 30, None).is_err());
    let bad: Legacy = ((2, 21, 4, 1), vec![(1, 11, [1, 0, 0, 0], 3, 22)]);
    assert!(ExecutedRequests::decode_legacy(&wire::encode(&bad).unwrap(), 1_000).is_err());
}

/// Layout 4 (64-bit ids, entries and watermarks) migrates to legacy watermarks: a client
/// starting with an old id cannot replay anything it executed before, another is new.
#[test]
fn a_layout_4_table_migrates_to_legacy_watermarks() {
    let v4: EncodedV4 = (
        (2, 0, 9, 1, 3),
        vec![(7, 40, [1, 0, 0, 0], 9), (9, 12, [3, 0, 0, 0], 8)],
        vec![(8, 100)],
    );
    let bytes = wire::encode(&v4).unwrap();
    let e = ExecutedRequests::decode_v4(&bytes, bytes.len()).unwrap();
    assert_eq!(
        (e.clients(), e.watermarks(), e.legacy_watermarks()),
        (0, 0, 3)
    );
    assert_eq!((e.evicted(), e.refused_ahead(), e.max_clients()), (1, 3, 2));
    for (old, highest) in [(7, 40), (8, 100), (9, 12)] {
        let id = with_prefix(old, 0x5a);
        assert!(e.settled(id, highest), "{old}");
        assert_eq!(e.next_fresh(id), highest + 1);
        // The same 8 bytes under another id: bound too (only its own floor is raised).
        assert_eq!(e.next_fresh(with_prefix(old, 1)), highest + 1);
        // One byte of the 8 differs: a new client.
        let mut other = id;
        other.0[7] ^= 0x80;
        assert_eq!(e.next_fresh(other), 0);
    }
    // It re-encodes in layout 5 and reads back.
    let again = ExecutedRequests::decode(&e.encode().unwrap(), 10_000).unwrap();
    assert_eq!(again, e);
    // Bad layout 4 bytes are refused.
    let both: EncodedV4 = (
        (2, 0, 9, 0, 0),
        vec![(7, 40, [1, 0, 0, 0], 9)],
        vec![(7, 1)],
    );
    assert!(ExecutedRequests::decode_v4(&wire::encode(&both).unwrap(), 1_000).is_err());
    let over: EncodedV4 = (
        (1, 0, 9, 0, 0),
        vec![(7, 40, [1, 0, 0, 0], 9), (9, 12, [3, 0, 0, 0], 8)],
        vec![],
    );
    assert!(ExecutedRequests::decode_v4(&wire::encode(&over).unwrap(), 1_000).is_err());
}

/// A simple model of the table: every number each client executed, its highest, the full
/// entries by last execution, and which clients were evicted (to their highest).
#[derive(Default)]
struct Model {
    done: BTreeMap<u64, BTreeSet<u64>>,
    in_table: BTreeMap<u64, u64>, // client -> last execution
    evicted: BTreeMap<u64, u64>,  // client -> watermark
    clock: u64,
}

impl Model {
    fn admits(&self, client: u64, n: u64) -> bool {
        let done = self.done.get(&client);
        let highest = done.and_then(|d| d.last().copied());
        let ceiling = match (self.in_table.contains_key(&client), highest) {
            (true, Some(h)) => h.saturating_add(AHEAD_WINDOW),
            _ => match self.evicted.get(&client) {
                Some(&w) => w.saturating_add(AHEAD_WINDOW),
                None => AHEAD_WINDOW - 1,
            },
        };
        if n > ceiling {
            return false;
        }
        if let Some(&w) = self.evicted.get(&client) {
            return n > w;
        }
        match highest {
            None => true,
            Some(h) => !done.is_some_and(|d| d.contains(&n)) && (n > h || h - n < REQUEST_WINDOW),
        }
    }

    fn execute(&mut self, client: u64, n: u64, cap: usize) {
        if !self.in_table.contains_key(&client) && self.in_table.len() >= cap {
            let (&old, _) = self.in_table.iter().min_by_key(|(_, t)| **t).unwrap();
            self.in_table.remove(&old);
            let w = *self.done[&old].last().unwrap();
            self.evicted.insert(old, w);
        }
        if self.evicted.remove(&client).is_some() {
            // Back: its numbers at or below the watermark stay executed (the model keeps
            // them all in `done`; the ones never used are given up).
            let w = *self.done[&client].last().unwrap();
            let d = self.done.get_mut(&client).unwrap();
            for m in w.saturating_sub(REQUEST_WINDOW)..=w {
                d.insert(m);
            }
        }
        self.clock += 1;
        self.in_table.insert(client, self.clock);
        self.done.entry(client).or_default().insert(n);
    }
}

fn hostile_number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..600,
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(AHEAD_WINDOW - 1),
        Just(AHEAD_WINDOW),
        (0u64..4).prop_map(|k| k * AHEAD_WINDOW + 3),
        any::<u64>(),
    ]
}

proptest! {
    /// Against the model, with eviction and hostile numbers (`u64::MAX`, `u64::MAX - 1`,
    /// jumps to the ceiling and beyond, many clients forcing eviction): the table admits
    /// exactly what the model admits, no `(client, number)` executes twice, and an honest
    /// client numbering consecutively (client 0, interleaved) is never refused, whatever
    /// the others do.
    #[test]
    fn hostile_clients_cannot_replay_or_refuse_an_honest_one(
        cap in 1usize..4,
        ops in proptest::collection::vec((1u64..8, hostile_number(), any::<bool>()), 0..300),
    ) {
        let now = None; // only the history bounds numbers
        let mut e = ExecutedRequests::with_max_clients(cap);
        let mut model = Model::default();
        let mut ever: BTreeSet<(u64, u64)> = BTreeSet::new();
        let mut honest = 0u64;
        for (client, number, honest_turn) in ops {
            let (client, number) = if honest_turn {
                honest += 1;
                (0, honest)
            } else {
                (client, number)
            };
            let ok = model.admits(client, number);
            let got = e.admit(c(client), number, now);
            prop_assert_eq!(got.is_ok(), ok, "{} {}: {:?}", client, number, got);
            if client == 0 {
                prop_assert!(got.is_ok(), "the honest client refused: {:?}", got);
            }
            if ok {
                prop_assert!(ever.insert((client, number)), "{} {} executed twice", client, number);
                model.execute(client, number, cap);
            }
            prop_assert_eq!(
                (e.clients(), e.watermarks(), e.floor()),
                (model.in_table.len(), model.evicted.len(), 0)
            );
        }
        let bytes = e.encode().unwrap();
        prop_assert_eq!(ExecutedRequests::decode(&bytes, bytes.len()).unwrap(), e);
    }

    /// Against a model (every executed number, the highest so far), no eviction: a number
    /// executes iff it never executed, lies inside the window of the highest executed
    /// before it and under the ceiling.
    #[test]
    fn matches_the_set_model(ops in proptest::collection::vec((0u64..3, 0u64..700), 0..400)) {
        let mut e = ExecutedRequests::new();
        let mut done: BTreeSet<(u64, u64)> = BTreeSet::new();
        let mut highest: BTreeMap<u64, u64> = BTreeMap::new();
        for (client, number) in ops {
            let fresh = !done.contains(&(client, number));
            let in_window = highest
                .get(&client)
                .is_none_or(|&h| number > h || h - number < REQUEST_WINDOW);
            let got = e.admit(c(client), number, None);
            prop_assert_eq!(got.is_ok(), fresh && in_window, "{} {}: {:?}", client, number, got);
            if got.is_ok() {
                done.insert((client, number));
                let h = highest.entry(client).or_insert(number);
                *h = (*h).max(number);
            }
        }
        let bytes = e.encode().unwrap();
        prop_assert_eq!(ExecutedRequests::decode(&bytes, bytes.len()).unwrap(), e);
    }
}
