//! Signature checks: one at a time against the batch equation (a plain bench binary).
//!
//! Run: `cargo bench -p sim-bft --bench verify`
//!
//! Signs `N` messages with 4 keys (as 4 replicas' internal clients would), then checks them
//! with `crypto::verify` one by one (the baseline, measured in the same run) and with
//! `crypto::verify_many` in batches of several sizes, and prints the cost per signature and
//! the ratio. Both use the same cofactored rule (docs/replica.md, "Signature verification").
//! Then the simulator-only `sim` scheme (issue 28): tagging and checking the same messages, and
//! messages of 48 and 400 bytes (a prepare, a pre-prepare), against ed25519's figures.

use std::time::{Duration, Instant};

use sim_bft::crypto::{
    SigBytes, SigCheck, Signatures, replica_key, replica_signing_key, sign, verify, verify_many,
};

const N: usize = 4_096;

#[allow(clippy::disallowed_methods)]
fn timed(f: impl FnOnce()) -> Duration {
    // The benchmark driver's one real-clock read pair.
    let t0 = Instant::now();
    f();
    t0.elapsed()
}

fn per_sig_us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6 / N as f64
}

fn main() {
    let keys: Vec<_> = (0..4).map(|i| replica_signing_key(1, i)).collect();
    let vks: Vec<_> = keys.iter().map(|k| k.verifying_key()).collect();
    let msgs: Vec<Vec<u8>> = (0..N as u32).map(|i| i.to_le_bytes().repeat(24)).collect();
    let mut sigs: Vec<SigBytes> = Vec::with_capacity(N);
    let signing = timed(|| {
        sigs = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| sign(&keys[i % 4], m))
            .collect();
    });
    println!("sign: {:.1} us/signature", per_sig_us(signing));
    let single = timed(|| {
        for (i, (m, s)) in msgs.iter().zip(&sigs).enumerate() {
            assert!(verify(&vks[i % 4], m, s, None));
        }
    });
    let base = per_sig_us(single);
    println!("verify one by one (baseline): {base:.1} us/signature");
    for batch in [3usize, 4, 8, 32, 256, N] {
        let d = timed(|| {
            for chunk in (0..N).collect::<Vec<_>>().chunks(batch) {
                let checks: Vec<SigCheck<'_>> = chunk
                    .iter()
                    .map(|&i| SigCheck {
                        key: &vks[i % 4],
                        msg: &msgs[i],
                        sig: &sigs[i],
                    })
                    .collect();
                assert!(verify_many(&checks, None).into_iter().all(|ok| ok));
            }
        });
        let us = per_sig_us(d);
        println!(
            "verify_many, batches of {batch:>4}: {us:.1} us/signature ({:.2}x the baseline's speed)",
            base / us
        );
    }

    let ed_sign = per_sig_us(signing);
    let keys: Vec<_> = (0..4).map(|i| replica_key(Signatures::Sim, 1, i)).collect();
    let vks: Vec<_> = keys.iter().map(|k| k.verifying_key()).collect();
    for len in [48usize, 96, 400] {
        let msgs: Vec<Vec<u8>> = (0..N as u32)
            .map(|i| i.to_le_bytes().repeat(len / 4))
            .collect();
        let mut tags: Vec<SigBytes> = Vec::with_capacity(N);
        let tagging = timed(|| {
            tags = msgs
                .iter()
                .enumerate()
                .map(|(i, m)| sign(&keys[i % 4], m))
                .collect();
        });
        let checking = timed(|| {
            for (i, (m, s)) in msgs.iter().zip(&tags).enumerate() {
                assert!(verify(&vks[i % 4], m, s, None));
            }
        });
        let (t, c) = (per_sig_us(tagging), per_sig_us(checking));
        println!(
            "sim scheme, {len}-byte messages: tag {t:.2} us ({:.0}x ed25519 signing's speed), \
             check {c:.2} us ({:.0}x ed25519 single verification's speed)",
            ed_sign / t,
            base / c
        );
    }
}
