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
