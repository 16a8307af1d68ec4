//! Comparing a kernel's output to the float64 reference, within the tolerance the output
//! earns ([`Tolerances`]).

use hopfuse::DType;
use std::collections::BTreeMap;

// Defined in `hopfuse-api` (part of every run's result).
pub use hopfuse_api::run::{BadElement, Check};

/// The relative-L2 tolerance each output of a run is validated with, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tolerances(BTreeMap<String, f64>);

impl Tolerances {
    /// What each output of `fusion` (as written) earns: its dtype's tolerance, or a
    /// low-precision product's it is computed from
    /// ([`hopfuse::backend::reference::tolerance`]).
    pub fn of_fusion(fusion: &hopfuse::fusion::Fusion) -> Tolerances {
        Tolerances(
            hopfuse::backend::reference::tolerance::output_tolerances(fusion)
                .into_iter()
                .collect(),
        )
    }

    /// Each output's dtype's tolerance: the outputs of a hand-written kernel (the self-test's),
    /// which has no fusion to analyse.
    pub fn of_dtypes<'a>(outputs: impl IntoIterator<Item = (&'a str, DType)>) -> Tolerances {
        Tolerances(
            outputs
                .into_iter()
                .map(|(name, dtype)| (name.to_string(), dtype.tolerance()))
                .collect(),
        )
    }

    /// Output `output`'s tolerance; an error names an output the run does not have.
    pub fn of(&self, output: &str) -> Result<f64, String> {
        self.0
            .get(output)
            .copied()
            .ok_or_else(|| format!("no tolerance for output `{output}`: it is not an output"))
    }
}

/// Compares `out` to `reference` element by element. Passes iff both have the same length,
/// `rel_l2 <= tolerance` (the output's, from [`Tolerances`]), no output is NaN/inf where the
/// reference is finite, and every non-finite reference element is matched exactly.
pub fn check(
    output: &str,
    dtype: DType,
    tolerance: f64,
    out: &[f64],
    reference: &[f64],
) -> Result<Check, String> {
    if out.len() != reference.len() {
        return Err(format!(
            "output `{output}` has {} elements but the reference has {}",
            out.len(),
            reference.len()
        ));
    }
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

    /// `out` checked against `reference` at `dtype`'s own tolerance.
    fn at_dtype(dtype: DType, out: &[f64], reference: &[f64]) -> Check {
        check("y", dtype, dtype.tolerance(), out, reference).unwrap()
    }

    #[test]
    fn exact_match_passes_with_zero_error() {
        let c = at_dtype(DType::F32, &[1.0, -2.0, 3.0], &[1.0, -2.0, 3.0]);
        assert_eq!(c.rel_l2, 0.0);
        assert_eq!(c.max_abs, 0.0);
        assert!(c.passed);
        assert!(c.first_bad.is_none());
    }

    #[test]
    fn relative_l2_and_max_abs() {
        // diff = (0, 0, 0.5) vs ref norm sqrt(1 + 4 + 4) = 3 → rel = 0.5 / 3.
        let c = at_dtype(DType::BF16, &[1.0, 2.0, 2.5], &[1.0, 2.0, 2.0]);
        assert!((c.rel_l2 - 0.5 / 3.0).abs() < 1e-15, "{}", c.rel_l2);
        assert_eq!(c.max_abs, 0.5);
        assert!(!c.passed);
        assert_eq!(c.first_bad.unwrap().index, 2);
    }

    #[test]
    fn the_tolerance_given_decides() {
        let reference = [1.0, 1.0, 1.0, 1.0];
        let out = [1.0, 1.0, 1.0, 1.0 + 1e-3]; // rel_l2 = 5e-4
        assert!(at_dtype(DType::BF16, &out, &reference).passed);
        assert!(at_dtype(DType::F16, &out, &reference).passed);
        let c = at_dtype(DType::F32, &out, &reference);
        assert!(!c.passed);
        assert_eq!(c.tolerance, 1e-5);
        // An f32 output of a bf16 product earns 1e-3.
        let c = check("y", DType::F32, 1e-3, &out, &reference).unwrap();
        assert!(c.passed);
        assert_eq!((c.dtype, c.tolerance), (DType::F32, 1e-3));
    }

    fn fusion(src: &str) -> hopfuse::fusion::Fusion {
        hopfuse::reference_fusion(src).unwrap()
    }

    #[test]
    fn tolerances_are_what_each_output_earns() {
        // Step 19's outputs: an e4m3 cast and the f32 amax of the FP8 product.
        let step19 = fusion(
            "fusion f {\n  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input scale: f32\n  p = cast(broadcast(a, axis=1), f32) * cast(broadcast(b, axis=0), f32)\n  y = sum(p, axis=2) * scale\n  c = cast(y, f8e4m3, saturate=true)\n  amax = max(abs(y), axis=[0, 1])\n  output c\n  output amax\n}",
        );
        let t = Tolerances::of_fusion(&step19);
        assert_eq!((t.of("c"), t.of("amax")), (Ok(2e-2), Ok(2e-2)));
        // The H200's amax at 8192^3 (rel_l2 4.60e-3): a FAIL at f32's 1e-5, a PASS now.
        let (got, want) = ([1.0 + 4.6e-3], [1.0]);
        assert!(
            !check("amax", DType::F32, DType::F32.tolerance(), &got, &want)
                .unwrap()
                .passed
        );
        assert!(
            check("amax", DType::F32, t.of("amax").unwrap(), &got, &want)
                .unwrap()
                .passed
        );
        // A plain f32 add keeps f32's.
        let add = fusion("fusion f {\n  input x: f32[N]\n  y = x + 1.0\n  output y\n}");
        assert_eq!(Tolerances::of_fusion(&add).of("y"), Ok(1e-5));
        assert!(Tolerances::of_fusion(&add).of("x").is_err());
        // A hand-written kernel's outputs: their dtypes'.
        let t = Tolerances::of_dtypes([("z", DType::BF16), ("i", DType::I32)]);
        assert_eq!((t.of("z"), t.of("i")), (Ok(1e-2), Ok(0.0)));
    }

    #[test]
    fn nan_output_never_passes() {
        let c = at_dtype(DType::F32, &[1.0, f64::NAN], &[1.0, 2.0]);
        assert_eq!(c.non_finite, 1);
        assert!(!c.passed);
        assert_eq!(c.first_bad.as_ref().unwrap().index, 1);
        // The NaN is kept out of the sums, which stay finite.
        assert_eq!(c.rel_l2, 0.0);
        let c = at_dtype(DType::F32, &[f64::INFINITY], &[2.0]);
        assert!(!c.passed);
    }

    #[test]
    fn non_finite_reference_must_be_matched() {
        let c = at_dtype(
            DType::F32,
            &[f64::NAN, f64::INFINITY, 1.0],
            &[f64::NAN, f64::INFINITY, 1.0],
        );
        assert!(c.passed, "{c:?}");
        assert_eq!(c.reference_non_finite, 2);
        let c = at_dtype(DType::F32, &[0.0, 1.0], &[f64::NAN, 1.0]);
        assert!(!c.passed);
        assert_eq!(c.reference_non_finite_mismatched, 1);
        let c = at_dtype(DType::F32, &[f64::NEG_INFINITY], &[f64::INFINITY]);
        assert!(!c.passed);
    }

    #[test]
    fn all_zero_reference_uses_absolute_error() {
        assert!(at_dtype(DType::F32, &[0.0, 0.0], &[0.0, 0.0]).passed);
        let c = at_dtype(DType::F32, &[0.0, 1e-3], &[0.0, 0.0]);
        assert!((c.rel_l2 - 1e-3).abs() < 1e-18);
        assert!(!c.passed);
    }

    #[test]
    fn integers_must_match_exactly() {
        assert!(at_dtype(DType::I32, &[3.0, -4.0], &[3.0, -4.0]).passed);
        assert!(!at_dtype(DType::I32, &[3.0, -4.0], &[3.0, -5.0]).passed);
        // The i32 poison (i32::MAX) left in an unwritten element fails.
        assert!(!at_dtype(DType::I32, &[i32::MAX as f64], &[7.0]).passed);
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
        let c = at_dtype(DType::F32, &out, &reference);
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
        let c = at_dtype(DType::F32, &out, &reference);
        assert_eq!(c.first_bad.unwrap().index, 250_000);
    }

    #[test]
    fn length_mismatch_is_an_error() {
        assert!(
            check("y", DType::F32, DType::F32.tolerance(), &[1.0], &[1.0, 2.0])
                .unwrap_err()
                .contains("2")
        );
    }
}
