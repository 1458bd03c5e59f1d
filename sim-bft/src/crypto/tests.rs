//! Tests of the cluster's keys, the scheme dispatch and the ed25519 memo.

use super::*;
use proptest::prelude::*;

fn ed(key: &SigningKey) -> ed25519_dalek::VerifyingKey {
    match key.verifying_key() {
        VerifyKey::Ed25519(k) => k,
        VerifyKey::Sim(_) => panic!("not an ed25519 key"),
    }
}

#[test]
fn vouched_signatures_are_the_ones_that_verify() {
    let key = replica_signing_key(7, 1);
    let vk = key.verifying_key();
    let cache = VerifyCache::new(16);
    let sig = sign_vouched(&key, b"prepare 5", Some(&cache));
    assert_eq!(
        sig,
        sign(&key, b"prepare 5"),
        "vouching does not change the signature"
    );
    // A memo hit, and a real check agrees with it.
    assert!(cache.contains(&memo_key(&ed(&key), b"prepare 5", &sig)));
    assert!(verify(&vk, b"prepare 5", &sig, None));
    // Changed bytes are not vouched for: verified for real and rejected.
    let mut flipped = sig;
    flipped[7] ^= 1;
    assert!(!verify(&vk, b"prepare 5", &flipped, Some(&cache)));
    assert!(!verify(&vk, b"prepare 6", &sig, Some(&cache)));
    // Another key claiming the signature misses the memo and fails.
    let other = replica_signing_key(7, 2).verifying_key();
    assert!(!verify(&other, b"prepare 5", &sig, Some(&cache)));
}

#[test]
fn sim_keys_never_touch_the_memo() {
    let key = replica_key(Signatures::Sim, 7, 1);
    let vk = key.verifying_key();
    let cache = VerifyCache::new(16);
    let sig = sign_vouched(&key, b"prepare 5", Some(&cache));
    cache.offer(&vk, b"prepare 5", &sig);
    let g = cache.inner.lock().unwrap();
    assert!(g.set.is_empty() && g.offered.is_empty());
    drop(g);
    assert!(verify(&vk, b"prepare 5", &sig, Some(&cache)));
    assert!(cache.inner.lock().unwrap().set.is_empty());
}

/// The seeded check of issue 28: under both schemes, flipped bytes (in the message or the
/// signature), another signer's signature, a signature made under the other scheme and forged
/// tags are refused, alone and in batches, memo or not.
#[test]
fn flipped_bytes_and_forged_tags_are_refused_under_both_schemes() {
    let mut rng = crate::sim::SimRng::new(28);
    for scheme in Signatures::ALL {
        let other = match scheme {
            Signatures::Ed25519 => Signatures::Sim,
            _ => Signatures::Ed25519,
        };
        let ring = Keyring::new(scheme, 5, 4, 2);
        let signer = replica_key(scheme, 5, 1);
        assert_eq!(signer.scheme(), scheme);
        let vk = ring.replica(1).unwrap();
        assert_eq!(vk, &signer.verifying_key());
        let cache = VerifyCache::new(64);
        for round in 0..32 {
            let len = 1 + (rng.next_u64() % 300) as usize;
            let msg: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let sig = sign_vouched(&signer, &msg, Some(&cache));
            assert!(
                verify(vk, &msg, &sig, Some(&cache)),
                "{scheme} round {round}"
            );
            assert!(verify(vk, &msg, &sig, None));
            let mut bad_sig = sig;
            bad_sig[(rng.next_u64() % 64) as usize] ^= 1 << (rng.next_u64() % 8);
            let mut bad_msg = msg.clone();
            bad_msg[(rng.next_u64() as usize) % len] ^= 1 << (rng.next_u64() % 8);
            let mut forged = [0u8; 64];
            forged.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            let replica2 = sign(&replica_key(scheme, 5, 2), &msg);
            let other_scheme = sign(&replica_key(other, 5, 1), &msg);
            let client = sign(&client_key(scheme, 5, 1), &msg);
            let bad: [(&[u8], &SigBytes); 6] = [
                (&msg, &bad_sig),
                (&bad_msg, &sig),
                (&msg, &forged),
                (&msg, &replica2),
                (&msg, &other_scheme),
                (&msg, &client),
            ];
            for (i, (m, s)) in bad.iter().enumerate() {
                assert!(
                    !verify(vk, m, s, Some(&cache)),
                    "{scheme} round {round} bad {i}"
                );
                assert!(!verify(vk, m, s, None), "{scheme} round {round} bad {i}");
            }
            let mut checks: Vec<SigCheck<'_>> = bad
                .iter()
                .map(|(m, s)| SigCheck {
                    key: vk,
                    msg: m,
                    sig: s,
                })
                .collect();
            checks.push(SigCheck {
                key: vk,
                msg: &msg,
                sig: &sig,
            });
            let want = [false, false, false, false, false, false, true];
            assert_eq!(verify_many(&checks, Some(&cache)), want);
            assert_eq!(verify_many(&checks, None), want);
        }
        // The other signers' keys in the ring verify their own signatures only.
        let msg = b"checkpoint 32";
        for id in 0..4 {
            let s = sign(&replica_key(scheme, 5, id), msg);
            for j in 0..4 {
                assert_eq!(verify(ring.replica(j).unwrap(), msg, &s, None), id == j);
            }
        }
        let s = sign(&client_key(scheme, 5, 1), msg);
        assert!(verify(ring.client(1).unwrap(), msg, &s, None));
        assert!(!verify(ring.client(0).unwrap(), msg, &s, None));
    }
}

#[test]
fn offered_signatures_are_verified_with_the_next_miss_and_only_good_ones_remembered() {
    let key = replica_signing_key(5, 0);
    let vk = key.verifying_key();
    let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 33]).collect();
    let mut sigs: Vec<SigBytes> = msgs.iter().map(|m| sign(&key, m)).collect();
    sigs[2][10] ^= 4;
    let cache = VerifyCache::new(64);
    for i in 1..5 {
        cache.offer(&vk, &msgs[i], &sigs[i]);
    }
    let memo = |i: usize| memo_key(&ed(&key), &msgs[i], &sigs[i]);
    assert!(
        (1..5).all(|i| !cache.contains(&memo(i))),
        "offering verifies nothing"
    );
    // A miss on message 0 verifies the offered ones in the same batch.
    assert!(verify(&vk, &msgs[0], &sigs[0], Some(&cache)));
    assert!([0, 1, 3, 4].iter().all(|i| cache.contains(&memo(*i))));
    assert!(
        !cache.contains(&memo(2)),
        "a bad signature is never remembered"
    );
    // The bad one is rejected when its receiver checks it, offered or not.
    assert!(!verify(&vk, &msgs[2], &sigs[2], Some(&cache)));
    cache.offer(&vk, &msgs[2], &sigs[2]);
    assert!(!verify(&vk, &msgs[2], &sigs[2], Some(&cache)));
    // A miss whose own signature is bad still lets the good offered ones in.
    let cache = VerifyCache::new(64);
    cache.offer(&vk, &msgs[1], &sigs[1]);
    cache.offer(&vk, &msgs[3], &sigs[3]);
    assert!(!verify(&vk, &msgs[2], &sigs[2], Some(&cache)));
    assert!(cache.contains(&memo(1)) && cache.contains(&memo(3)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// The batch check says exactly what one check per signature says, memo or not, under
    /// either scheme.
    #[test]
    fn verify_many_equals_verify_each(
        corrupt in proptest::collection::vec((0usize..40, 0usize..64, 1u8..=255), 0..4),
        n in 0usize..40,
        memo in any::<bool>(),
        sim in any::<bool>(),
    ) {
        let scheme = if sim { Signatures::Sim } else { Signatures::Ed25519 };
        let keys = [replica_key(scheme, 9, 0), replica_key(scheme, 9, 1), client_key(scheme, 9, 0)];
        let vks: Vec<VerifyKey> = keys.iter().map(SigningKey::verifying_key).collect();
        let msgs: Vec<Vec<u8>> = (0..n).map(|i| format!("request {i}").into_bytes()).collect();
        let mut sigs: Vec<SigBytes> =
            msgs.iter().enumerate().map(|(i, m)| sign(&keys[i % 3], m)).collect();
        for (i, byte, x) in corrupt {
            if let Some(s) = sigs.get_mut(i) {
                s[byte] ^= x;
            }
        }
        let checks: Vec<SigCheck<'_>> = (0..n)
            .map(|i| SigCheck { key: &vks[i % 3], msg: &msgs[i], sig: &sigs[i] })
            .collect();
        let cache = VerifyCache::new(64);
        let cache = memo.then_some(&cache);
        let want: Vec<bool> = checks.iter().map(|c| verify(c.key, c.msg, c.sig, None)).collect();
        prop_assert_eq!(verify_many(&checks, cache), want.clone());
        // Second time through: memo hits must give the same answers.
        prop_assert_eq!(verify_many(&checks, cache), want);
    }
}

#[test]
fn keys_are_deterministic_and_distinct() {
    let bytes = |k: &SigningKey| k.verifying_key().public_key();
    for scheme in Signatures::ALL {
        let a = replica_key(scheme, 7, 0);
        assert_eq!(bytes(&a), bytes(&replica_key(scheme, 7, 0)));
        assert_ne!(bytes(&a), bytes(&replica_key(scheme, 7, 1)));
        assert_ne!(bytes(&a), bytes(&replica_key(scheme, 8, 0)));
        assert_ne!(bytes(&a), bytes(&client_key(scheme, 7, 0)));
    }
    assert_ne!(
        bytes(&replica_key(Signatures::Sim, 7, 0)),
        bytes(&replica_key(Signatures::Ed25519, 7, 0))
    );
}

#[test]
fn scheme_names_round_trip() {
    for s in Signatures::ALL {
        assert_eq!(s.to_string().parse::<Signatures>(), Ok(s));
    }
    assert!("rsa".parse::<Signatures>().is_err());
    assert_eq!(Signatures::default(), Signatures::Ed25519);
}

#[test]
fn verify_accepts_good_rejects_bad_and_cache_is_sound() {
    let k = replica_signing_key(1, 2);
    let ring = Keyring::from_seed(1, 4, 2);
    let sig = sign(&k, b"hello");
    let cache = VerifyCache::new(2);
    let pk = ring.replica(2).unwrap();
    assert!(verify(pk, b"hello", &sig, Some(&cache)));
    assert!(verify(pk, b"hello", &sig, Some(&cache)));
    assert!(!verify(pk, b"hellp", &sig, Some(&cache)));
    let mut bad = sig;
    bad[3] ^= 1;
    assert!(!verify(pk, b"hello", &bad, Some(&cache)));
    assert!(!verify(ring.replica(1).unwrap(), b"hello", &sig, None));
    assert_eq!(ring.client(internal_client_id(2)), Some(pk));
    assert!(ring.client(5).is_none());
    assert_eq!(internal_client_owner(internal_client_id(3)), Some(3));
    assert_eq!(internal_client_owner(9), None);
}

/// The `sim` scheme's two promises, through the protocol's own wire path (issue 28's mutation
/// check): a Byzantine replica holding only its own keys (replica 1's signing key, the
/// keyring every replica holds, and every message it has seen) cannot make a message, a
/// request or a reply that verifies as another signer's; and any changed byte of a genuine
/// signed message fails verification. Breaking `Sim::verify` (comparing part of the tag, or
/// always accepting) or the key derivation (tags independent of the secret) fails this test.
#[test]
fn a_byzantine_replica_cannot_tag_for_another_sim_key() {
    use crate::protocol::{
        Body, Payload, Request, RequestKind, SignedMsg, SignedRequest, Wire, codec,
    };
    let (seed, scheme) = (9, Signatures::Sim);
    let ring = Keyring::new(scheme, seed, 4, 2);
    let mine = replica_key(scheme, seed, 1);
    let victim = replica_key(scheme, seed, 2);
    let body = |seq: u64| Body::Prepare {
        view: 0,
        seq,
        digest: [seq as u8; 32],
    };
    // A genuine message of replica 2 that the Byzantine replica saw, and its own messages.
    let genuine = SignedMsg::sign(
        &victim,
        &Payload {
            from: 2,
            body: body(5),
        },
    )
    .unwrap();
    assert_eq!(genuine.open(&ring, 1 << 20, None).unwrap().from, 2);
    let own = SignedMsg::sign(
        &mine,
        &Payload {
            from: 1,
            body: body(5),
        },
    )
    .unwrap();
    assert!(own.open(&ring, 1 << 20, None).is_ok());

    // 1. Its own key, another sender named: refused for every other replica.
    for from in [0, 2, 3] {
        let forged = SignedMsg::sign(
            &mine,
            &Payload {
                from,
                body: body(6),
            },
        )
        .unwrap();
        assert!(
            forged.open(&ring, 1 << 20, None).is_err(),
            "own key claiming replica {from}"
        );
    }
    // 2. Replica 2's tag moved onto another message (another seq, another sender).
    for payload in [
        Payload {
            from: 2,
            body: body(6),
        },
        Payload {
            from: 1,
            body: body(5),
        },
    ] {
        let spliced = SignedMsg {
            payload: codec::encode(&payload).unwrap(),
            sig: genuine.sig,
        };
        assert!(spliced.open(&ring, 1 << 20, None).is_err(), "{payload:?}");
    }
    // 3. Guessing: its own tag of the same bytes, and tags made from its own tags (the halves
    //    swapped, shifted, xored with the victim's tag of another message).
    let other = SignedMsg::sign(
        &victim,
        &Payload {
            from: 2,
            body: body(7),
        },
    )
    .unwrap();
    let target = codec::encode(&Payload {
        from: 2,
        body: body(8),
    })
    .unwrap();
    let mine_tag = sign(&mine, &target);
    let mut guesses = vec![mine_tag, genuine.sig, other.sig];
    let mut swapped = mine_tag;
    swapped.rotate_left(16);
    guesses.push(swapped);
    let mut xored = genuine.sig;
    xored
        .iter_mut()
        .zip(other.sig)
        .zip(mine_tag)
        .for_each(|((a, b), c)| *a ^= b ^ c);
    guesses.push(xored);
    for (i, sig) in guesses.iter().enumerate() {
        let m = SignedMsg {
            payload: target.clone(),
            sig: *sig,
        };
        assert!(m.open(&ring, 1 << 20, None).is_err(), "guess {i}");
    }
    // 4. A request in a user client's name, and in replica 2's internal client's name.
    for client in [0, internal_client_id(2)] {
        let request = Request {
            client,
            req_seq: 1,
            kind: RequestKind::Write,
            payload: b"steal".to_vec(),
        };
        let forged = SignedRequest::sign(&mine, request).unwrap();
        assert!(!forged.verify(&ring, None), "client {client}");
    }
    // 5. Any changed byte of replica 2's wire message: a flipped bit anywhere (payload or tag)
    //    either does not decode or does not open; nothing else is accepted as replica 2's.
    let wire = codec::encode(&Wire::Signed(genuine.clone())).unwrap();
    for i in 0..wire.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = wire.clone();
            bad[i] ^= bit;
            if let Ok(Wire::Signed(m)) = codec::decode::<Wire>(&bad, 1 << 20) {
                assert!(
                    m.open(&ring, 1 << 20, None).is_err(),
                    "byte {i} bit {bit:#x} of {}: a changed message accepted",
                    wire.len()
                );
            }
        }
    }
}

/// Published BLAKE3 digests (the BLAKE3 repository's `test_vectors.json`: input byte `i` is
/// `i % 251`, the first 32 bytes of `hash`), on both sides of the 2 KiB edge where the `sim`
/// hasher stops gathering and hashes incrementally.
const BLAKE3_VECTORS: [(usize, &str); 4] = [
    (
        1_023,
        "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11",
    ),
    (
        2_048,
        "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a",
    ),
    (
        2_049,
        "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030",
    ),
    (
        4_097,
        "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995",
    ),
];

fn hex(d: Digest32) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `sim` scheme's hasher gives BLAKE3's published digests whole, byte by byte and through
/// the trace hash's buffer.
#[test]
fn the_sim_hasher_is_blake3() {
    for (n, want) in BLAKE3_VECTORS {
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        assert_eq!(hex(Signatures::Sim.digest(&data)), want, "{n}");
        let mut whole = Signatures::Sim.hasher();
        whole.update(&data);
        assert_eq!(hex(whole.finalize()), want, "{n} whole");
        let mut bytes = Signatures::Sim.hasher();
        for b in &data {
            bytes.update([*b]);
        }
        assert_eq!(hex(bytes.finalize()), want, "{n} byte by byte");
        let mut buffered = BufferedHasher::new(Signatures::Sim.hasher());
        for piece in data.chunks(97) {
            buffered.update(piece);
        }
        assert_eq!(hex(buffered.finalize()), want, "{n} buffered");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under both schemes, however the input is cut (across the `sim` hasher's 2 KiB edge and
    /// the trace buffer's 64 KiB one), a hasher's digest is the scheme's one-call digest.
    #[test]
    fn hashers_digest_the_whole_input_however_it_is_cut(
        len in prop_oneof![0usize..5_000, 60_000usize..140_000],
        cuts in proptest::collection::vec(any::<usize>(), 0..24),
        seed in any::<u8>(),
    ) {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
        at.extend([0, len]);
        at.sort_unstable();
        for scheme in Signatures::ALL {
            let mut h = scheme.hasher();
            let mut b = BufferedHasher::new(scheme.hasher());
            for w in at.windows(2) {
                h.update(&data[w[0]..w[1]]);
                b.update(&data[w[0]..w[1]]);
            }
            prop_assert_eq!(h.finalize(), scheme.digest(&data));
            prop_assert_eq!(b.finalize(), scheme.digest(&data));
        }
    }
}
