//! Comparing a kernel's output to the float64 reference.

use hopfuse::DType;

// Defined in `hopfuse-api` (part of every run's result).
pub use hopfuse_api::run::{BadElement, Check};

/// Compares `out` to `reference` element by element. Passes iff both have the same length,
/// `rel_l2 <= dtype.tolerance()`, no output is NaN/inf where the reference is finite, and every
/// non-finite reference element is matched exactly.
pub fn check(output: &str, dtype: DType, out: &[f64], reference: &[f64]) -> Result<Check, String> {
    if out.len() != reference.len() {
        return Err(format!(
            "output `{output}` has {} elements but the reference has {}",
            out.len(),
            reference.len()
        ));
    }
    let tolerance = dtype.tolerance();
    // Sums per chunk (on every core), added in chunk order: the same result on any machine.
    const CHUNK: usize = 1 << 16;
    let mut parts = vec![Sums::default(); out.len().div_ceil(CHUNK)];
    crate::host_parallel::Threads::all().for_chunks(&mut parts, 1, |i, part| {
        let range = i * CHUNK..((i + 1) * CHUNK).min(out.len());
        part[0] = Sums::of(range.start, &out[range.clone()], &reference[range]);
    });
    let Sums {
        diff2,
        ref2,
        max_abs,
        non_finite,
        ref_nf,
        ref_nf_bad,
        first_bad,
        worst,
    } = parts.into_iter().fold(Sums::default(), Sums::then);
    let rel_l2 = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        diff2.sqrt()
    };
    let passed = non_finite == 0 && ref_nf_bad == 0 && rel_l2 <= tolerance;
    // With no rule broken by a single element, point at the largest error instead.
    let first_bad = first_bad.or_else(|| if passed { None } else { worst.map(|(_, b)| b) });
    Ok(Check {
        output: output.to_string(),
        dtype,
        elements: out.len(),
        rel_l2,
        max_abs,
        tolerance,
        non_finite,
        reference_non_finite: ref_nf,
        reference_non_finite_mismatched: ref_nf_bad,
        first_bad,
        passed,
    })
}

/// What [`check`] adds up over a range of elements.
#[derive(Clone, Debug, Default)]
struct Sums {
    diff2: f64,
    ref2: f64,
    max_abs: f64,
    non_finite: usize,
    ref_nf: usize,
    ref_nf_bad: usize,
    first_bad: Option<BadElement>,
    /// The largest error, the first one among equals.
    worst: Option<(f64, BadElement)>,
}

impl Sums {
    /// Over `out` and `reference`, whose first element is element `start`.
    fn of(start: usize, out: &[f64], reference: &[f64]) -> Sums {
        let mut s = Sums::default();
        for (i, (&o, &r)) in out.iter().zip(reference).enumerate() {
            let bad = BadElement {
                index: start + i,
                output: o,
                reference: r,
            };
            if !r.is_finite() {
                s.ref_nf += 1;
                let same = (r.is_nan() && o.is_nan()) || r == o;
                if !same {
                    s.ref_nf_bad += 1;
                    s.first_bad.get_or_insert(bad);
                }
                continue;
            }
            if !o.is_finite() {
                s.non_finite += 1;
                s.first_bad.get_or_insert(bad);
                continue;
            }
            let d = (o - r).abs();
            s.diff2 += d * d;
            s.ref2 += r * r;
            if d > s.max_abs {
                s.max_abs = d;
            }
            if d > 0.0 && s.worst.as_ref().is_none_or(|(w, _)| d > *w) {
                s.worst = Some((d, bad));
            }
        }
        s
    }

    /// These sums followed by `next`'s (the elements after them).
    fn then(self, next: Sums) -> Sums {
        let worst = match (self.worst, next.worst) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
        Sums {
            diff2: self.diff2 + next.diff2,
            ref2: self.ref2 + next.ref2,
            max_abs: self.max_abs.max(next.max_abs),
            non_finite: self.non_finite + next.non_finite,
            ref_nf: self.ref_nf + next.ref_nf,
            ref_nf_bad: self.ref_nf_bad + next.ref_nf_bad,
            first_bad: self.first_bad.or(next.first_bad),
            worst,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match_passes_with_zero_error() {
        let c = check("y", DType::F32, &[1.0, -2.0, 3.0], &[1.0, -2.0, 3.0]).unwrap();
        assert_eq!(c.rel_l2, 0.0);
        assert_eq!(c.max_abs, 0.0);
        assert!(c.passed);
        assert!(c.first_bad.is_none());
    }

    #[test]
    fn relative_l2_and_max_abs() {
        // diff = (0, 0, 0.5) vs ref norm sqrt(1 + 4 + 4) = 3 → rel = 0.5 / 3.
        let c = check("y", DType::BF16, &[1.0, 2.0, 2.5], &[1.0, 2.0, 2.0]).unwrap();
        assert!((c.rel_l2 - 0.5 / 3.0).abs() < 1e-15, "{}", c.rel_l2);
        assert_eq!(c.max_abs, 0.5);
        assert!(!c.passed);
        assert_eq!(c.first_bad.unwrap().index, 2);
    }

    #[test]
    fn tolerance_comes_from_the_dtype() {
        let reference = [1.0, 1.0, 1.0, 1.0];
        let out = [1.0, 1.0, 1.0, 1.0 + 1e-3]; // rel_l2 = 5e-4
        assert!(check("y", DType::BF16, &out, &reference).unwrap().passed);
        assert!(check("y", DType::F16, &out, &reference).unwrap().passed);
        let c = check("y", DType::F32, &out, &reference).unwrap();
        assert!(!c.passed);
        assert_eq!(c.tolerance, 1e-5);
    }

    #[test]
    fn nan_output_never_passes() {
        let c = check("y", DType::F32, &[1.0, f64::NAN], &[1.0, 2.0]).unwrap();
        assert_eq!(c.non_finite, 1);
        assert!(!c.passed);
        assert_eq!(c.first_bad.as_ref().unwrap().index, 1);
        // The NaN is kept out of the sums, which stay finite.
        assert_eq!(c.rel_l2, 0.0);
        let c = check("y", DType::F32, &[f64::INFINITY], &[2.0]).unwrap();
        assert!(!c.passed);
    }

    #[test]
    fn non_finite_reference_must_be_matched() {
        let c = check(
            "y",
            DType::F32,
            &[f64::NAN, f64::INFINITY, 1.0],
            &[f64::NAN, f64::INFINITY, 1.0],
        )
        .unwrap();
        assert!(c.passed, "{c:?}");
        assert_eq!(c.reference_non_finite, 2);
        let c = check("y", DType::F32, &[0.0, 1.0], &[f64::NAN, 1.0]).unwrap();
        assert!(!c.passed);
        assert_eq!(c.reference_non_finite_mismatched, 1);
        let c = check("y", DType::F32, &[f64::NEG_INFINITY], &[f64::INFINITY]).unwrap();
        assert!(!c.passed);
    }

    #[test]
    fn all_zero_reference_uses_absolute_error() {
        assert!(
            check("y", DType::F32, &[0.0, 0.0], &[0.0, 0.0])
                .unwrap()
                .passed
        );
        let c = check("y", DType::F32, &[0.0, 1e-3], &[0.0, 0.0]).unwrap();
        assert!((c.rel_l2 - 1e-3).abs() < 1e-18);
        assert!(!c.passed);
    }

    #[test]
    fn integers_must_match_exactly() {
        assert!(
            check("y", DType::I32, &[3.0, -4.0], &[3.0, -4.0])
                .unwrap()
                .passed
        );
        assert!(
            !check("y", DType::I32, &[3.0, -4.0], &[3.0, -5.0])
                .unwrap()
                .passed
        );
        // The i32 poison (i32::MAX) left in an unwritten element fails.
        assert!(
            !check("y", DType::I32, &[i32::MAX as f64], &[7.0])
                .unwrap()
                .passed
        );
    }

    /// Chunks (summed on threads) find the same first bad element, largest error and sums as
    /// one pass over a long output.
    #[test]
    fn long_outputs_are_checked_in_chunks_like_short_ones() {
        let n = 300_000;
        let reference: Vec<f64> = (0..n).map(|i| (i % 97) as f64 - 48.0).collect();
        let mut out = reference.clone();
        out[70_000] += 0.5;
        out[250_000] += 2.0;
        out[260_000] = f64::NAN;
        out[270_000] -= 2.0;
        let c = check("y", DType::F32, &out, &reference).unwrap();
        let one = Sums::of(0, &out, &reference);
        assert_eq!(c.non_finite, 1);
        assert_eq!(c.first_bad.as_ref().unwrap().index, 260_000);
        assert_eq!(c.max_abs, 2.0);
        assert_eq!(one.worst.as_ref().unwrap().1.index, 250_000);
        let rel = (one.diff2 / one.ref2).sqrt();
        assert!(
            (c.rel_l2 - rel).abs() <= 1e-12 * rel,
            "{} vs {rel}",
            c.rel_l2
        );
        // Without the NaN, the largest error (the first of the two 2.0s) is pointed at.
        out[260_000] = reference[260_000];
        let c = check("y", DType::F32, &out, &reference).unwrap();
        assert_eq!(c.first_bad.unwrap().index, 250_000);
    }

    #[test]
    fn length_mismatch_is_an_error() {
        assert!(check("y", DType::F32, &[1.0], &[1.0, 2.0])
            .unwrap_err()
            .contains("2"));
    }
}
