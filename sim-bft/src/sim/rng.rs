//! A small, stable pseudo-random generator (SplitMix64) for the simulator.
//!
//! The algorithm is fixed here rather than borrowed from a crate so that a seed replays the same
//! run forever: `StdRng` and friends do not promise a stable output sequence across versions.
//! Each subsystem (network, clocks, crashes, clients, Byzantine behaviour) gets its own stream,
//! split from the run seed, so that changing how much randomness one subsystem draws does not
//! shift the choices of another.

/// SplitMix64: one u64 of state, full period, good enough statistical quality for fault injection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent stream for the subsystem named `label`, derived from this seed.
    ///
    /// The label is hashed with FNV-1a (stable) and mixed into the seed, so streams for different
    /// labels do not overlap in any practical sense.
    pub fn split(seed: u64, label: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in label.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut s = Self::new(seed ^ h.rotate_left(17));
        // Discard one output so that nearby seeds start from well-mixed states.
        let _ = s.next_u64();
        s
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in `0..bound` (0 when `bound` is 0). Uses rejection-free multiply-shift;
    /// the tiny bias is irrelevant for fault injection.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A uniform value in `lo..=hi` (returns `lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// A uniform signed value in `-bound..=bound`.
    pub fn symmetric(&mut self, bound: i64) -> i64 {
        let b = bound.unsigned_abs();
        let v = self.range(0, b.saturating_mul(2));
        (v as i64).wrapping_sub(b as i64)
    }

    /// True with probability `p` (clamped to `0.0..=1.0`).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits give a uniform double in [0, 1).
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_labels_differ() {
        let mut a = SimRng::split(7, "net");
        let mut b = SimRng::split(7, "net");
        let mut c = SimRng::split(7, "clock");
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn known_answer_pins_the_algorithm() {
        // SplitMix64 reference output for seed 0 (first value): a change of algorithm would break
        // every recorded seed, so it is pinned.
        let mut r = SimRng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn bounds_hold() {
        let mut r = SimRng::new(42);
        for _ in 0..10_000 {
            assert!(r.below(7) < 7);
            let v = r.range(3, 5);
            assert!((3..=5).contains(&v));
            let s = r.symmetric(4);
            assert!((-4..=4).contains(&s));
        }
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }
}
