//! The schedule text a scheduler writes, one statement per line: the caches of the usual
//! pattern (each full-rank input `cache_after`, each full-rank output `cache_before`), loop
//! statements on the reference tensor, and the closing `propagate` + `inline_most`.

use super::Facts;
use crate::fusion::TensorId;
use std::fmt::Write;

pub(super) struct ScheduleText {
    lines: Vec<String>,
    /// The tensor the loop statements act on, as written.
    reference: String,
}

impl ScheduleText {
    pub fn new(reference: &str) -> ScheduleText {
        ScheduleText {
            lines: Vec::new(),
            reference: reference.to_string(),
        }
    }

    pub fn comment(&mut self, text: &str) {
        self.lines.push(format!("// {text}"));
    }

    pub fn line(&mut self, statement: String) {
        self.lines.push(statement);
    }

    /// `x_c = cache_after(x[, input_options])` for each of `inputs`, `y_c = cache_before(y)`
    /// for each of `outputs`, with fresh names.
    pub fn caches(
        &mut self,
        facts: &Facts,
        inputs: &[TensorId],
        outputs: &[TensorId],
        input_options: &str,
    ) {
        for (tensors, func, options) in [
            (inputs, "cache_after", input_options),
            (outputs, "cache_before", ""),
        ] {
            for &t in tensors {
                let name = facts.name(t);
                let mut s = format!("{} = {func}({name}", facts.fresh(name, "c"));
                if !options.is_empty() {
                    let _ = write!(s, ", {options}");
                }
                s.push(')');
                self.lines.push(s);
            }
        }
    }

    /// `ref.split(axis, factor)` (`outer` when the factor is the outer extent).
    pub fn split(&mut self, axis: usize, factor: i64, outer: bool) {
        let r = &self.reference;
        let tail = if outer { ", outer" } else { "" };
        self.lines
            .push(format!("{r}.split({axis}, {factor}{tail})"));
    }

    pub fn merge(&mut self, axis: usize) {
        self.lines.push(format!("{}.merge({axis})", self.reference));
    }

    pub fn reorder(&mut self, order: &[usize]) {
        let list: Vec<String> = order.iter().map(|a| a.to_string()).collect();
        self.lines
            .push(format!("{}.reorder({})", self.reference, list.join(", ")));
    }

    /// `ref.parallelize(axis, p)` for each pair.
    pub fn parallelize(&mut self, axes: &[(usize, &str)]) {
        for (axis, p) in axes {
            self.lines
                .push(format!("{}.parallelize({axis}, {p})", self.reference));
        }
    }

    /// `propagate(ref)` then `inline_most()`: every other tensor takes the reference's loops
    /// and is computed as deep inside them as it may.
    pub fn propagate_and_inline(&mut self) {
        self.lines.push(format!("propagate({})", self.reference));
        self.lines.push("inline_most()".to_string());
    }

    /// The statements of another text (on another tensor), after these.
    pub fn append(&mut self, other: ScheduleText) {
        self.lines.extend(other.lines);
    }

    pub fn finish(self) -> String {
        let mut s = self.lines.join("\n");
        s.push('\n');
        s
    }
}
