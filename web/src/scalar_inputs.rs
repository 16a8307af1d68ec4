//! The playground's scalar-input fields (`input eps: f32 = 1e-6`), one next to the size boxes
//! per scalar input: takes the launch plan and the values the user typed; emits the fields
//! ([`of`]: name, dtype, the program's value as the default), a field's text as a value or why
//! not ([`parse`]), and the values Run sends (`RunBody.scalars`: only the typed ones the
//! program still has, [`for_run`]). The service checks each value against its dtype.

use hopfuse::plan::{LaunchPlan, Param};
use hopfuse::DType;
use std::collections::BTreeMap;

/// One scalar input of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalarInput {
    pub name: String,
    pub dtype: DType,
    /// The program's `= value`; None: a run draws one from the seed.
    pub default: Option<f64>,
}

/// The scalar inputs of `plan`, in parameter order.
pub fn of(plan: &LaunchPlan) -> Vec<ScalarInput> {
    plan.params
        .iter()
        .filter_map(|p| match p {
            Param::Scalar { name, dtype, value } => Some(ScalarInput {
                name: name.clone(),
                dtype: *dtype,
                default: *value,
            }),
            _ => None,
        })
        .collect()
}

impl ScalarInput {
    /// The program's value as the field shows it: in the dtype's precision (`1e-6` as an f32
    /// reads `0.000001`, not its f64 expansion); None when a run draws it.
    pub fn default_text(&self) -> Option<String> {
        let v = self.default?;
        Some(
            if self.dtype == DType::F64 || self.dtype.int_range().is_some() {
                v.to_string()
            } else {
                (v as f32).to_string()
            },
        )
    }
}

/// A field's text: None when empty (the program's value, or a drawn one), else a finite
/// decimal number (JSON carries no infinity or NaN), or why not.
pub fn parse(text: &str) -> Result<Option<f64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Some(v)),
        Ok(_) => Err(format!("`{text}`: a run takes a finite number")),
        Err(_) => Err(format!("`{text}` is not a number (e.g. 1e-6, -0.5, 3)")),
    }
}

/// The scalar inputs of every plan (each kernel of a split fusion), each once, in order of
/// first appearance.
pub fn of_plans(plans: &[LaunchPlan]) -> Vec<ScalarInput> {
    let mut all: Vec<ScalarInput> = Vec::new();
    for s in plans.iter().flat_map(of) {
        if all.iter().all(|a| a.name != s.name) {
            all.push(s);
        }
    }
    all
}

/// The values Run sends: the typed ones whose name is one of the program's scalar `inputs` (a
/// value kept from an earlier program is not sent).
pub fn for_run(inputs: &[ScalarInput], typed: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    inputs
        .iter()
        .filter_map(|s| typed.get(&s.name).map(|&v| (s.name.clone(), v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALED: &str = "fusion scaled {\n  input x: f32[N]\n  input eps: f32 = 1e-6\n  input k: i32\n  y = x * eps + k\n  output y\n}\n";

    fn plan() -> LaunchPlan {
        let sizes = [("N".to_string(), 1024)].into();
        crate::model::compile(SCALED, &sizes)
            .expect("compiles")
            .plan
    }

    #[test]
    fn each_scalar_input_is_a_field_with_the_programs_value() {
        let fields = of(&plan());
        assert_eq!(
            fields,
            [
                ScalarInput {
                    name: "eps".into(),
                    dtype: DType::F32,
                    default: Some(1e-6f32 as f64)
                },
                ScalarInput {
                    name: "k".into(),
                    dtype: DType::I32,
                    default: None
                },
            ]
        );
    }

    #[test]
    fn the_programs_value_shows_in_its_dtypes_precision() {
        let fields = of(&plan());
        assert_eq!(fields[0].default_text().as_deref(), Some("0.000001"));
        assert_eq!(fields[1].default_text(), None);
        let int = ScalarInput {
            name: "k".into(),
            dtype: DType::I32,
            default: Some(-7.0),
        };
        assert_eq!(int.default_text().as_deref(), Some("-7"));
    }

    #[test]
    fn a_fields_text_is_a_finite_number_or_empty() {
        assert_eq!(parse(" 1e-6 "), Ok(Some(1e-6)));
        assert_eq!(parse("-3"), Ok(Some(-3.0)));
        assert_eq!(parse("  "), Ok(None));
        assert_eq!(
            parse("abc"),
            Err("`abc` is not a number (e.g. 1e-6, -0.5, 3)".into())
        );
        assert_eq!(
            parse("inf"),
            Err("`inf`: a run takes a finite number".into())
        );
    }

    #[test]
    fn run_sends_only_the_programs_typed_scalars() {
        let typed = [("k".to_string(), 3.0), ("alpha".to_string(), 2.0)].into();
        let sent = for_run(&of(&plan()), &typed);
        assert_eq!(sent, [("k".to_string(), 3.0)].into());
    }
}
