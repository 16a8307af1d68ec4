//! Comparing a kernel's output to the float64 reference.

use hopfuse::DType;
use serde::{Deserialize, Serialize};

/// How one output compared to the reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub output: String,
    pub dtype: DType,
    pub elements: usize,
    /// `||out - ref||_2 / ||ref||_2` over the elements where the reference is finite; when the
    /// reference is all zeros, the absolute `||out - ref||_2` (so an exact match is still 0).
    pub rel_l2: f64,
    /// `max |out - ref|` over the elements where the reference is finite.
    pub max_abs: f64,
    /// The relative-L2 tolerance of the output's dtype ([`DType::tolerance`]).
    pub tolerance: f64,
    /// Elements where the reference is finite but the output is NaN or infinite (unwritten
    /// elements keep the NaN poison and land here).
    pub non_finite: usize,
    /// Elements where the reference itself is NaN or infinite: they must match it exactly
    /// (NaN for NaN, the same infinity) and are left out of the L2 sums.
    pub reference_non_finite: usize,
    /// Of those, how many the output did not match.
    pub reference_non_finite_mismatched: usize,
    /// Index and values of the first element that broke a rule, for the report.
    pub first_bad: Option<BadElement>,
    pub passed: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BadElement {
    pub index: usize,
    pub output: f64,
    pub reference: f64,
}

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
    let (mut diff2, mut ref2, mut max_abs) = (0f64, 0f64, 0f64);
    let (mut non_finite, mut ref_nf, mut ref_nf_bad) = (0usize, 0usize, 0usize);
    let mut first_bad: Option<BadElement> = None;
    let mut worst: Option<(f64, BadElement)> = None;
    for (i, (&o, &r)) in out.iter().zip(reference).enumerate() {
        let bad = BadElement {
            index: i,
            output: o,
            reference: r,
        };
        if !r.is_finite() {
            ref_nf += 1;
            let same = (r.is_nan() && o.is_nan()) || r == o;
            if !same {
                ref_nf_bad += 1;
                first_bad.get_or_insert(bad);
            }
            continue;
        }
        if !o.is_finite() {
            non_finite += 1;
            first_bad.get_or_insert(bad);
            continue;
        }
        let d = (o - r).abs();
        diff2 += d * d;
        ref2 += r * r;
        if d > max_abs {
            max_abs = d;
        }
        if d > 0.0 && worst.as_ref().is_none_or(|(w, _)| d > *w) {
            worst = Some((d, bad));
        }
    }
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

    #[test]
    fn length_mismatch_is_an_error() {
        assert!(check("y", DType::F32, &[1.0], &[1.0, 2.0])
            .unwrap_err()
            .contains("2"));
    }
}
