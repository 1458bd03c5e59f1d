//! The simulator's clock arithmetic: the one division its clock conversions make at every
//! delivery and timer.

/// `num / den` (truncated toward zero, as `i128`'s `/`), in 64-bit arithmetic when both fit:
/// the clock conversions run at every delivery and timer, and a 128-bit division is a library
/// call of a few dozen instructions. The quotient is the same (`div_i128_is_i128_division`).
#[inline]
pub(super) fn div_i128(num: i128, den: i128) -> i128 {
    match (i64::try_from(num), i64::try_from(den)) {
        // `checked_div` is `None` for a zero divisor and for `i64::MIN / -1` (whose quotient
        // does not fit): both go to the 128-bit division, as before.
        (Ok(n), Ok(d)) => n.checked_div(d).map_or_else(|| num / den, i128::from),
        _ => num / den,
    }
}

#[cfg(test)]
mod clock_tests {
    use super::div_i128;
    use proptest::prelude::*;

    /// The 64-bit path gives `i128`'s quotient: signs, truncation toward zero, the edges of
    /// `i64` (including `i64::MIN / -1`, which falls back) and numerators beyond it.
    #[test]
    fn div_i128_is_i128_division() {
        let edges = [
            0i128,
            1,
            -1,
            999_999,
            -999_999,
            1_000_000,
            -1_000_001,
            i128::from(i64::MAX),
            i128::from(i64::MIN),
            i128::from(i64::MAX) + 1,
            i128::from(i64::MIN) - 1,
            i128::from(u64::MAX) * 1_000_000,
            -i128::from(u64::MAX) * 1_000_000,
        ];
        for &n in &edges {
            for d in [
                1i128,
                -1,
                7,
                -7,
                1_000_000,
                999_950,
                1_000_050,
                i128::from(i64::MAX),
                i128::from(i64::MIN),
                i128::from(i64::MAX) + 3,
            ] {
                assert_eq!(div_i128(n, d), n / d, "{n} / {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn div_i128_matches_on_clock_values(t in any::<u64>(), ppm in -100_000i64..100_000, den in 1i128..2_000_000) {
            let num = i128::from(t) * i128::from(ppm);
            prop_assert_eq!(div_i128(num, 1_000_000), num / 1_000_000);
            prop_assert_eq!(div_i128(num, den), num / den);
            let small = i128::from(t % 100_000_000_000) * 1_000_000;
            prop_assert_eq!(div_i128(small, den), small / den);
        }
    }
}
