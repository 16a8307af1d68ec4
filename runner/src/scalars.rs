//! `--scalar eps=1e-6`: values for a fusion's scalar inputs (`input eps: f32`), which a run
//! otherwise takes from the program's `= value` or draws from the seed.
//!
//! Takes the flag's text ([`merge_scalars`]) and a launch plan; checks that every name is a
//! scalar input of the plan and that every value fits its dtype (an integer type takes a whole
//! number in its range, a float type a number within its largest finite value, or an infinity
//! or NaN as written); emits the value a run passes, rounded to the dtype ([`resolve`]), or
//! the plan with those values as its scalars' values ([`apply`], what `compile --plan` prints).

use hopfuse::plan::{LaunchPlan, Param};
use hopfuse::DType;
use std::collections::BTreeMap;

/// Adds `NAME=VALUE[,NAME=VALUE...]` to `scalars` (so `--scalar a=1 --scalar b=2` works); a
/// value is a decimal number (`1e-6`, `-0.5`, `inf`, `nan`); a name given twice is an error.
pub fn merge_scalars(scalars: &mut BTreeMap<String, f64>, text: &str) -> Result<(), String> {
    for item in text.split(',') {
        let item = item.trim();
        let Some((name, value)) = item.split_once('=') else {
            return Err(format!(
                "`{item}` is not NAME=VALUE (example: --scalar eps=1e-6)"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let parsed: f64 = value
            .parse()
            .map_err(|_| format!("`{value}` is not a number (in `{item}`)"))?;
        if scalars.insert(name.to_string(), parsed).is_some() {
            return Err(format!("scalar `{name}` is given twice"));
        }
    }
    Ok(())
}

/// The value each scalar input of `plan` gets, by name: the given one (checked against its
/// dtype and rounded to it), else the program's (`None`: none, the run draws one). A given
/// name that is no scalar input of the plan is an error that lists those there are.
pub fn resolve(
    plan: &LaunchPlan,
    given: &BTreeMap<String, f64>,
) -> Result<BTreeMap<String, Option<f64>>, String> {
    resolve_all(std::slice::from_ref(plan), given)
}

/// [`resolve`] for the kernels of a fusion split into several: the scalar inputs of every plan
/// (a later kernel may read one the first does not), a given name that is none of them an
/// error.
pub fn resolve_all(
    plans: &[LaunchPlan],
    given: &BTreeMap<String, f64>,
) -> Result<BTreeMap<String, Option<f64>>, String> {
    let mut out = BTreeMap::new();
    for p in plans.iter().flat_map(|plan| &plan.params) {
        if let Param::Scalar { name, dtype, value } = p {
            let v = match given.get(name) {
                Some(&v) => Some(fit(name, *dtype, v)?),
                None => *value,
            };
            out.insert(name.clone(), v);
        }
    }
    if let Some(unknown) = given.keys().find(|n| !out.contains_key(*n)) {
        let known: Vec<&str> = out.keys().map(String::as_str).collect();
        return Err(if known.is_empty() {
            format!("--scalar `{unknown}`: the program has no scalar input")
        } else {
            format!(
                "--scalar `{unknown}`: not a scalar input of the program (its scalar inputs: {})",
                known.join(", ")
            )
        });
    }
    Ok(out)
}

/// `plan` with the given values as its scalar inputs' values.
pub fn apply(plan: &mut LaunchPlan, given: &BTreeMap<String, f64>) -> Result<(), String> {
    let values = resolve(plan, given)?;
    set_values(plan, &values);
    Ok(())
}

/// `plan`'s scalar inputs with their `values` (by name, from [`resolve`] or [`resolve_all`]).
pub fn set_values(plan: &mut LaunchPlan, values: &BTreeMap<String, Option<f64>>) {
    for p in &mut plan.params {
        if let Param::Scalar { name, value, .. } = p {
            if let Some(v) = values.get(name.as_str()) {
                *value = *v;
            }
        }
    }
}

/// `v` as a value of `dtype`, or why it is none.
fn fit(name: &str, dtype: DType, v: f64) -> Result<f64, String> {
    if let Some((lo, hi)) = dtype.int_range() {
        if v.fract() != 0.0 || !(lo..=hi).contains(&v) {
            return Err(format!(
                "--scalar {name}={v}: `{name}` is {dtype}, which holds whole numbers from {lo} to {hi}"
            ));
        }
    } else if let Some(max) = dtype.max_finite() {
        if v.is_finite() && v.abs() > max {
            return Err(format!(
                "--scalar {name}={v}: beyond the largest finite {dtype} ({max})"
            ));
        }
    }
    Ok(dtype.round(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> LaunchPlan {
        let src = "fusion f {\n  input x: f32[N]\n  input eps: f32 = 1e-6\n  input k: i32\n  y = x * eps + k\n  output y\n}\n";
        hopfuse::compile(src, &Default::default()).unwrap().plan
    }

    fn given(text: &str) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        merge_scalars(&mut m, text).unwrap();
        m
    }

    /// A fusion split into kernels whose second kernel alone reads `eps`: a value for it is
    /// the run's, not an unknown name of the first kernel.
    #[test]
    fn a_split_fusions_scalars_are_every_kernels() {
        let src = "fusion f {\n  input x: f32[M, N]\n  input eps: f32 = 1e-6\n  y = x / (broadcast(sum(x * x, axis=0), axis=0) + eps)\n  output y\n}\n";
        let plans: Vec<LaunchPlan> = match hopfuse::compile_program(src, &Default::default()) {
            Ok(hopfuse::Compiled::Segmented(s)) => s.kernels.into_iter().map(|k| k.plan).collect(),
            _ => panic!("not split"),
        };
        assert!(resolve(&plans[0], &given("eps=0.5")).is_err());
        let values = resolve_all(&plans, &given("eps=0.5")).unwrap();
        assert_eq!(values["eps"], Some(0.5));
        let mut second = plans[1].clone();
        set_values(&mut second, &values);
        assert!(second.params.iter().any(
            |p| matches!(p, Param::Scalar { name, value: Some(v), .. } if name == "eps" && *v == 0.5)
        ));
        let e = resolve_all(&plans, &given("alpha=1")).unwrap_err();
        assert!(e.contains("its scalar inputs: eps"), "{e}");
    }

    #[test]
    fn a_given_value_replaces_the_programs_and_others_keep_theirs() {
        let p = plan();
        let v = resolve(&p, &given("k=3")).unwrap();
        assert_eq!(v["k"], Some(3.0));
        assert_eq!(v["eps"], Some(1e-6f32 as f64));
        let v = resolve(&p, &given("eps=0.1, k=-2")).unwrap();
        assert_eq!(v["eps"], Some(0.1f32 as f64));
        assert_eq!(v["k"], Some(-2.0));
        // Not given, no value in the program: the run draws one.
        assert_eq!(resolve(&p, &BTreeMap::new()).unwrap()["k"], None);
        let mut p = p;
        apply(&mut p, &given("k=7")).unwrap();
        assert!(p.params.iter().any(
            |q| matches!(q, Param::Scalar { name, value: Some(v), .. } if name == "k" && *v == 7.0)
        ));
    }

    #[test]
    fn bad_names_and_values_say_why() {
        let p = plan();
        let e = resolve(&p, &given("epsilon=1")).unwrap_err();
        assert_eq!(
            e,
            "--scalar `epsilon`: not a scalar input of the program (its scalar inputs: eps, k)"
        );
        let e = resolve(&p, &given("k=1.5")).unwrap_err();
        assert!(e.contains("`k` is i32, which holds whole numbers"), "{e}");
        let e = resolve(&p, &given("eps=1e39")).unwrap_err();
        assert!(e.contains("beyond the largest finite f32"), "{e}");
        assert!(resolve(&p, &given("eps=-inf")).is_ok());
        let mut m = BTreeMap::new();
        for (text, needle) in [
            ("eps", "not NAME=VALUE"),
            ("eps=x", "not a number"),
            ("eps=1,eps=2", "given twice"),
        ] {
            let e = merge_scalars(&mut m, text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
            m.clear();
        }
    }
}
