//! One in-page compilation turned into what the panes show, and diagnostics turned into editor
//! positions (CodeMirror counts UTF-16 code units; the compiler gives byte spans): the pass
//! dumps, each marked changed or unchanged, the size boxes' parsing (whole numbers >= 1, or
//! why not), and the launch plan's rows evaluated with the sizes, its constraints and CUDA's
//! launch limits checked by the compiler's own `Constraint::check` (not again here).

use hopfuse::plan::{Constraint, LaunchError, LaunchPlan, Param, SizeExpr};
use serde::Serialize;
use std::collections::BTreeMap;

/// A pass dump with whether it changed the IR of the pass before it.
#[derive(Clone, Debug, PartialEq)]
pub struct PassView {
    pub name: &'static str,
    pub summary: &'static str,
    pub ir: String,
    pub changed: bool,
}

/// A successful compilation.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    pub cuda: String,
    pub plan: LaunchPlan,
    /// Why the plan has its index type (`index_type_for`).
    pub index_reason: String,
    pub passes: Vec<PassView>,
    /// Roles and circular buffers of the final kernel (the Pipeline pane).
    pub pipeline: hopfuse::backend::pipeline_view::PipelineView,
    /// What wrote each CUDA line (the PTX and SASS panes).
    pub lines: hopfuse::backend::codegen::lines::LineMap,
    /// The fusion as a PyTorch function (the PyTorch pane; `hopfuse compile --torch`).
    pub torch: String,
    /// What the PyTorch pane's Python snippet needs (`python_snippet`).
    pub python: crate::python_snippet::PythonCall,
    /// Set when no scheduler takes the fusion whole and it is split into several kernels
    /// (`hopfuse::segment`): the sentence the panes show (each kernel, its scheduler and why
    /// the split). `cuda` then holds every kernel's CUDA in turn under a header line; the
    /// passes, launch plan, pipeline and line map are the first kernel's.
    pub segments: Option<String>,
    /// The size symbols of every kernel, in order of first appearance (a split fusion's later
    /// kernels may have symbols the first does not): the size boxes and what Run sends.
    pub symbols: Vec<String>,
    /// The scalar inputs of every kernel, each once, in order of first appearance.
    pub scalars: Vec<crate::scalar_inputs::ScalarInput>,
}

/// A diagnostic located in the editor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diag {
    pub message: String,
    /// UTF-16 offsets into the program.
    pub from: usize,
    pub to: usize,
    pub line: usize,
    pub column: usize,
}

impl Diag {
    /// `line:column: message`, or the message alone for an error without a place.
    pub fn located(&self) -> String {
        if self.line == 0 {
            self.message.clone()
        } else {
            format!("{}:{}: {}", self.line, self.column, self.message)
        }
    }
}

/// A size box's text as a size: a whole number of at least 1 written in digits, or why not.
pub fn parse_size(text: &str) -> Result<i64, String> {
    let t = text.trim().replace('_', "");
    if t.is_empty() {
        return Err("empty: give a whole number of at least 1".into());
    }
    if let Ok(v) = t.parse::<i64>() {
        return if v >= 1 {
            Ok(v)
        } else {
            Err(format!("a size is at least 1, not {v}"))
        };
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("too large (at most {})", i64::MAX));
    }
    match t.parse::<f64>() {
        Ok(v) if t.contains(['e', 'E']) && v.fract() == 0.0 && (1.0..9.2e18).contains(&v) => {
            Err(format!("write it out in digits: {}", v as i64))
        }
        Ok(_) => Err("a size is a whole number".into()),
        Err(_) => Err(format!("`{}` is not a number", text.trim())),
    }
}

/// UTF-16 offset of a byte offset (clamped, and moved back to a character boundary).
pub fn utf16_offset(source: &str, byte: usize) -> usize {
    let mut b = byte.min(source.len());
    while !source.is_char_boundary(b) {
        b -= 1;
    }
    source[..b].encode_utf16().count()
}

/// `text` as a sentence of its own: a capital first letter and a full stop (the runner's notes
/// are clauses, `fake worker: the program was compiled ...`). ASCII capitals only: the Unicode
/// case tables would cost the cold load kilobytes for the runner's English.
pub fn sentence(text: &str) -> String {
    let mut out = text.trim().to_string();
    if let Some(first) = out.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    if !out.is_empty() && !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// Size given to a symbol the first time it appears (a size box left as it came).
pub const DEFAULT_SIZE: i64 = 4096;

/// The index type Run builds for `plan` at the `entered` sizes (a symbol not entered has
/// [`DEFAULT_SIZE`]), and why: the runner's rule (`hopfuse::index_type`). Sizes no tensor can
/// have (an overflowing element count) get the 64-bit index, with the reason.
pub fn index_type_for(
    plan: &LaunchPlan,
    entered: &BTreeMap<String, i64>,
) -> (hopfuse::IndexType, String) {
    hopfuse::index_type::choose_index_type(plan, &plan_sizes(plan, entered))
        .unwrap_or_else(|why| (hopfuse::IndexType::I64, why))
}

/// Compiles `source` (the whole pipeline, as `hopfuse compile` does) with the index type Run
/// picks for the `entered` sizes ([`index_type_for`]), so the CUDA, the Launch plan, the SASS
/// pane and Run show the same variant.
pub fn compile(source: &str, entered: &BTreeMap<String, i64>) -> Result<Compiled, Vec<Diag>> {
    let index_reason = std::cell::RefCell::new(String::new());
    let chosen = hopfuse::compile_program_choosing_index(
        source,
        &hopfuse::CompileOptions::default(),
        |plan| {
            let (index_type, why) = index_type_for(plan, entered);
            // Every kernel of a split fusion is chosen by the same rule; the first one's reason
            // is the one shown.
            let mut reason = index_reason.borrow_mut();
            if reason.is_empty() {
                *reason = why;
            }
            index_type
        },
    );
    let index_reason = index_reason.into_inner();
    let mut plans = Vec::new();
    let (c, segments) = match chosen {
        Ok(hopfuse::Compiled::One { compilation, .. }) => {
            plans.push(compilation.plan.clone());
            (Ok(*compilation), None)
        }
        Ok(hopfuse::Compiled::Segmented(s)) => {
            let text = segments_headline(&s.plan);
            plans.extend(s.plan.kernels.iter().map(|k| k.plan.clone()));
            let cuda = s.cuda_listing();
            let mut first = s.kernels.into_iter().next().expect("a split has kernels");
            first.cuda = cuda;
            // The whole fusion, for the Python snippet (the torch twin is of the source).
            first.fusion = s.fusion;
            (Ok(first), Some(text))
        }
        Err(d) => (Err(d), None),
    };
    match c {
        Ok(c) => {
            let python = crate::python_snippet::PythonCall::new(source, &c.fusion, &c.plan);
            let mut passes: Vec<PassView> = Vec::with_capacity(c.passes.len());
            for p in c.passes {
                let changed = passes.last().is_none_or(|prev| prev.ir != p.ir);
                passes.push(PassView {
                    name: p.name,
                    summary: p.summary,
                    ir: p.ir,
                    changed,
                });
            }
            Ok(Compiled {
                cuda: c.cuda,
                plan: c.plan,
                index_reason,
                passes,
                pipeline: c.pipeline,
                // A split fusion's CUDA has header lines and several kernels: no line map.
                lines: if segments.is_some() {
                    Default::default()
                } else {
                    c.lines
                },
                // Cannot fail once the program compiled (it parses and builds the same fusion).
                torch: hopfuse::torch_twin(source)
                    .map(|t| t.source)
                    .unwrap_or_default(),
                python,
                segments,
                symbols: every_symbol(&plans),
                scalars: crate::scalar_inputs::of_plans(&plans),
            })
        }
        Err(d) => Err(d
            .0
            .into_iter()
            .map(|d| {
                let (from, to) = match d.span {
                    Some(s) => {
                        let from = utf16_offset(source, s.start);
                        let mut to = utf16_offset(source, s.end).max(from);
                        // An empty span still gets a visible mark when there is a character.
                        if to == from && s.start < source.len() {
                            to = utf16_offset(source, s.start + 1).max(from + 1);
                        }
                        (from, to)
                    }
                    None => (0, 0),
                };
                Diag {
                    message: d.message,
                    from,
                    to,
                    line: d.line,
                    column: d.column,
                }
            })
            .collect()),
    }
}

/// The size symbols of `plans`, each once, in order of first appearance.
fn every_symbol(plans: &[LaunchPlan]) -> Vec<String> {
    let mut symbols: Vec<String> = Vec::new();
    for s in plans.iter().flat_map(|p| &p.symbols) {
        if !symbols.contains(s) {
            symbols.push(s.clone());
        }
    }
    symbols
}

/// What the panes say about a fusion split into kernels: how many, each one's scheduler and
/// why the split.
pub fn segments_headline(plan: &hopfuse::plan::SegmentedPlan) -> String {
    let mut text = format!(
        "No scheduler takes this fusion whole ({}), so it runs as {} kernels in order:",
        plan.reason.trim_end_matches('.'),
        plan.kernels.len()
    );
    for (k, kernel) in plan.kernels.iter().enumerate() {
        text.push_str(&format!(
            " {}. {} ({}, writes {}): {}.",
            k + 1,
            kernel.plan.kernel_name,
            kernel.scheduler,
            kernel.writes.join(", "),
            kernel.reason.trim_end_matches('.')
        ));
    }
    for m in &plan.intermediates {
        text.push_str(&format!(
            " Intermediate `{}`: {} [{}], {} bytes.",
            m.name,
            m.dtype.name(),
            m.shape
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            m.bytes
        ));
    }
    text.push_str(" The passes, launch plan and pipeline shown are the first kernel's.");
    text
}

/// The sizes of `symbols`: each one's entered value, or `default`. (Inserted one by one:
/// `collect` into a BTreeMap would link a sort for each iterator type it is called with.)
pub fn sizes_of(
    symbols: &[String],
    entered: &BTreeMap<String, i64>,
    default: i64,
) -> BTreeMap<String, i64> {
    let mut sizes = BTreeMap::new();
    for k in symbols {
        sizes.insert(k.clone(), entered.get(k).copied().unwrap_or(default));
    }
    sizes
}

/// The sizes the Launch plan is evaluated with, as Run sends them: the plan's own symbols, each
/// entered value or [`DEFAULT_SIZE`]. (The entered map also keeps symbols of earlier programs,
/// which the plan does not know and would refuse.)
pub fn plan_sizes(plan: &LaunchPlan, entered: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    sizes_of(&plan.symbols, entered, DEFAULT_SIZE)
}

/// `expr` with the sizes, or why not.
pub fn eval(expr: &SizeExpr, sizes: &BTreeMap<String, i64>) -> Result<i64, String> {
    expr.eval(sizes).map_err(|e| e.to_string())
}

/// A row of the Launch plan pane: a size expression and its value with the current sizes.
pub fn expr_row(expr: &SizeExpr, sizes: &BTreeMap<String, i64>) -> String {
    match (expr.as_const(), eval(expr, sizes)) {
        (Some(c), _) => c.to_string(),
        (None, Ok(v)) => format!("{expr} = {v}"),
        (None, Err(e)) => format!("{expr} ({e})"),
    }
}

/// A constraint in words, and whether the current sizes satisfy it (None: cannot tell, a size
/// is missing). The check is the compiler's ([`Constraint::check`], as the runner's).
pub fn constraint_row(c: &Constraint, sizes: &BTreeMap<String, i64>) -> (String, Option<bool>) {
    let text = match c {
        Constraint::Divisible {
            value,
            divisor,
            reason,
        } => format!("{value} % {divisor} == 0: {reason}"),
        Constraint::AtMost { value, max, reason } => format!("{value} <= {max}: {reason}"),
        Constraint::Positive { value, reason } => format!("{value} >= 1: {reason}"),
        Constraint::Equals {
            value,
            expected,
            reason,
        } => format!("{value} == {expected}: {reason}"),
    };
    let ok = match c.check(sizes) {
        Ok(()) => Some(true),
        Err(LaunchError::Eval(_)) => None,
        Err(_) => Some(false),
    };
    (text, ok)
}

/// A kernel parameter in one line: kind, name, details.
pub fn param_row(p: &Param) -> (String, String, String) {
    match p {
        Param::Tensor {
            name,
            dtype,
            role,
            shape,
        } => (
            "tensor".into(),
            name.clone(),
            format!(
                "{} [{}] {}",
                dtype.name(),
                shape
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                format!("{role:?}").to_ascii_lowercase()
            ),
        ),
        Param::Size { symbol } => ("size".into(), symbol.clone(), "index type".into()),
        Param::Scalar { name, dtype, .. } => ("scalar".into(), name.clone(), dtype.name().into()),
        Param::TensorMap { name, map } => (
            "tensor map".into(),
            name.clone(),
            format!("TMA map #{map}, 128 bytes by value"),
        ),
    }
}

/// Bytes in a short human form.
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n, 0);
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run sends the sizes and scalars of every kernel of a split fusion, not only the first
    /// one's (whose plan the Launch plan pane shows).
    #[test]
    fn a_split_fusions_later_kernels_bring_their_scalars() {
        let source = "fusion col_norm_eps {\n  input x: f32[M, N]\n  input eps: f32 = 1e-6\n  y = x / (broadcast(sum(x * x, axis=0), axis=0) + eps)\n  output y\n}\n";
        let c = compile(source, &BTreeMap::new()).unwrap();
        assert!(c.segments.is_some(), "split");
        assert!(
            crate::scalar_inputs::of(&c.plan).is_empty(),
            "the column sums take no eps"
        );
        assert_eq!(
            c.scalars
                .iter()
                .map(|s| (s.name.as_str(), s.default))
                .collect::<Vec<_>>(),
            [("eps", Some(1e-6f32 as f64))]
        );
        assert_eq!(c.symbols, ["M", "N"]);
        let typed = [("eps".to_string(), 0.5)].into();
        assert_eq!(
            crate::scalar_inputs::for_run(&c.scalars, &typed),
            [("eps".to_string(), 0.5)].into()
        );
    }

    /// A fusion no scheduler takes whole: the CUDA pane holds each kernel under its header
    /// line, and the panes get the split's sentence (the kernels, their schedulers, why, the
    /// intermediate) instead of a schedule to insert.
    #[test]
    fn a_split_fusion_shows_each_kernel_and_why() {
        let source = include_str!("../../examples/auto/col_norm.hf");
        let c = compile(source, &BTreeMap::new()).unwrap();
        let headers: Vec<&str> = c
            .cuda
            .lines()
            .filter(|l| l.starts_with("// ==== kernel"))
            .collect();
        assert_eq!(headers.len(), 2, "{headers:?}");
        assert!(headers[0].starts_with(
            "// ==== kernel 1 of 2: col_norm_s1_kernel (outer reduction): ends before `y`"
        ));
        assert_eq!(
            headers[1],
            "// ==== kernel 2 of 2: col_norm_s2_kernel (pointwise): the last segment"
        );
        assert!(c
            .cuda
            .contains("void __launch_bounds__(128) col_norm_s2_kernel("));
        let text = c.segments.expect("the split's sentence");
        assert!(text.starts_with("No scheduler takes this fusion whole (`y` reads the column reductions back over the columns"), "{text}");
        assert!(text.contains("so it runs as 2 kernels in order: 1. col_norm_s1_kernel (outer reduction, writes y_sum)"), "{text}");
        assert!(
            text.contains(" Intermediate `y_sum`: f32 [N], 4 * N bytes."),
            "{text}"
        );
        assert_eq!(c.plan.kernel_name, "col_norm_s1_kernel");
        // A one-kernel program has none of it.
        let one = compile(
            include_str!("../../examples/auto/softmax.hf"),
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(one.segments.is_none() && !one.cuda.contains("// ===="));
    }

    #[test]
    fn spans_become_utf16_offsets() {
        assert_eq!(utf16_offset("aé𝄞b", 1), 1);
        assert_eq!(utf16_offset("aé𝄞b", 3), 2);
        assert_eq!(utf16_offset("aé𝄞b", 4), 2); // inside 𝄞: back to its start
        assert_eq!(utf16_offset("aé𝄞b", 7), 4);
        assert_eq!(utf16_offset("aé𝄞b", 99), 5);
    }

    #[test]
    fn sizes_are_whole_numbers_of_at_least_one() {
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("16_384"), Ok(16384));
        assert_eq!(parse_size("0"), Err("a size is at least 1, not 0".into()));
        assert_eq!(parse_size("-5"), Err("a size is at least 1, not -5".into()));
        assert_eq!(
            parse_size("1e3"),
            Err("write it out in digits: 1000".into())
        );
        assert_eq!(parse_size("2.5"), Err("a size is a whole number".into()));
        assert_eq!(parse_size("M"), Err("`M` is not a number".into()));
        assert!(parse_size("").unwrap_err().starts_with("empty"));
        assert!(parse_size("99999999999999999999")
            .unwrap_err()
            .starts_with("too large"));
    }

    #[test]
    fn launch_limits_catch_a_grid_too_large() {
        let src = crate::examples::source(&crate::examples::find("basics/add").unwrap());
        let c = compile(src, &Default::default()).unwrap();
        let limits = c.plan.launch_limits();
        // add: a 1-D grid over M * N / 512 blocks; the block is constant (checked by the compiler).
        assert_eq!(limits.len(), 1, "{limits:?}");
        let sizes = |m: i64| BTreeMap::from([("M".to_string(), m), ("N".to_string(), 4096)]);
        assert_eq!(constraint_row(&limits[0], &sizes(4096)).1, Some(true));
        let (text, ok) = constraint_row(&limits[0], &sizes(3_000_000_000));
        assert_eq!(ok, Some(false), "{text}");
        assert!(
            text.contains("2147483647") && text.contains("grid x"),
            "{text}"
        );
        assert!(c.plan.concretize(&sizes(3_000_000_000)).is_err());
    }

    /// The README's first program compiles, and the panes show what the README says they do.
    #[test]
    fn the_readme_first_program_shows_what_the_readme_says() {
        let readme = include_str!("../../README.md");
        let block = readme.split("<!-- first-program").nth(1).unwrap();
        let program = block.split("```").nth(1).unwrap().trim_start();
        let c = compile(program, &BTreeMap::new()).unwrap();
        assert_eq!(c.plan.kernel_name, "scale_exp_kernel");
        assert!(
            c.cuda.contains("__launch_bounds__(128)") && c.cuda.contains("hf_vec<float, 4>"),
            "{}",
            c.cuda
        );
        let sizes = plan_sizes(&c.plan, &BTreeMap::new());
        let grid = expr_row(&c.plan.grid[0], &sizes);
        assert_eq!(grid, "ceilDiv(ceilDiv(M * N, 4), 128) = 32768");
        assert_eq!(expr_row(&c.plan.block[0], &sizes), "128");
        assert!(c.cuda.contains("typedef int index_t;"));
        assert!(c.pipeline.pipelines.is_empty());
        assert!(c.torch.contains("torch.exp(x) * 2.0"), "{}", c.torch);
    }

    #[test]
    fn notes_become_sentences() {
        assert_eq!(
            sentence("fake worker: nothing ran on a GPU"),
            "Fake worker: nothing ran on a GPU."
        );
        assert_eq!(sentence("Done."), "Done.");
        assert_eq!(sentence("  "), "");
    }

    /// A size left from an earlier program (K of a matrix product) is not the plan's: the
    /// Launch plan is evaluated with the plan's symbols only, as Run sends them.
    #[test]
    fn the_plan_takes_only_its_own_sizes() {
        let src = crate::examples::source(&crate::examples::find("basics/add").unwrap());
        let entered = BTreeMap::from([("K".to_string(), 64), ("M".to_string(), 1000)]);
        let c = compile(src, &entered).unwrap();
        assert!(matches!(
            c.plan.concretize(&entered),
            Err(LaunchError::UnknownSymbol(..))
        ));
        let sizes = plan_sizes(&c.plan, &entered);
        assert_eq!(
            sizes,
            BTreeMap::from([("M".to_string(), 1000), ("N".to_string(), DEFAULT_SIZE)])
        );
        assert!(c.plan.concretize(&sizes).is_ok());
    }

    /// The page compiles the variant Run builds: a 32-bit index while every tensor has fewer
    /// than 2^31 elements, else 64-bit, with the reason.
    #[test]
    fn the_index_type_is_the_one_run_picks() {
        let src = crate::examples::source(&crate::examples::find("basics/add").unwrap());
        let small = compile(src, &BTreeMap::new()).unwrap();
        assert_eq!(small.plan.index_type, hopfuse::IndexType::I32);
        assert!(small.cuda.contains("typedef int index_t;"));
        assert_eq!(
            small.index_reason,
            "every tensor has fewer than 2^31 elements"
        );
        let big = BTreeMap::from([("M".to_string(), 65536), ("N".to_string(), 65536)]);
        let large = compile(src, &big).unwrap();
        assert_eq!(large.plan.index_type, hopfuse::IndexType::I64);
        assert!(large.cuda.contains("typedef long long index_t;"));
        assert!(
            large.index_reason.contains(">= 2^31"),
            "{}",
            large.index_reason
        );
        assert_eq!(index_type_for(&small.plan, &big).0, hopfuse::IndexType::I64);
    }

    #[test]
    fn errors_are_located_and_passes_marked() {
        let e = compile("// é\nfusion f {\n  y = exp(x\n}", &Default::default()).unwrap_err();
        assert_eq!(e.len(), 1);
        // At the unclosed `(` (byte 26, UTF-16 offset 25: `é` is two bytes, one code unit).
        assert_eq!((e[0].from, e[0].to, e[0].line), (25, 26, 3), "{e:?}");
        assert_eq!(
            e[0].located(),
            "3:10: unclosed `(`: expected `)` before `}`"
        );
        let src = crate::examples::source(&crate::examples::find("basics/add").unwrap());
        let c = compile(src, &Default::default()).unwrap();
        assert!(c.passes[0].changed);
        assert!(c.cuda.contains("__global__"));
        // The TMA passes run (and are dumped) only for fusions with TMA loads, `mma` only for
        // tensor-core tiles, `persistent` and `tile_values` only for persistent grids,
        // `specialize` never here (the playground's kernel is generic over its sizes),
        // `online_softmax` only for an online softmax (`mask_bounds`, `mask_tiles` and
        // `longest_first` only for a causally masked one, `document_tiles` for a document mask), `welford` only for a one-pass variance, `online_logsumexp`
        // only for a one-pass log-sum-exp, `row_math` only for a row value broadcast into an
        // exponential or a division, `index_float` only for an `iota` converted to f32 and
        // `view_vectors` only for a view in a vectorized schedule, `merged_scales`, `scaled_max`
        // and `fma_exp2` only for a softmax of tensor-core scores (no example here has any).
        let tma_passes = [
            "tma",
            "tma_issue",
            "circular_buffer",
            "persistent",
            "tile_values",
            "specialize",
        ];
        let one_pass_forms = [
            "online_softmax",
            "welford",
            "online_logsumexp",
            "mask_bounds",
            "document_tiles",
            "mask_list",
            "mask_tiles",
            "longest_first",
            "row_math",
            "index_float",
            "distributed_bias",
            "view_vectors",
            "merged_scales",
            "scaled_max",
            "fma_exp2",
        ];
        let count = |skip: &[&str]| {
            hopfuse::passes::PIPELINE
                .iter()
                .filter(|p| !skip.contains(&p.name))
                .count()
        };
        assert_eq!(
            c.passes.len(),
            1 + count(&[&tma_passes[..], &["mma"], &one_pass_forms[..],].concat())
        );
        let tma = compile(
            crate::examples::source(&crate::examples::find("tma/exp_2d").unwrap()),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(
            tma.passes.len(),
            1 + count(
                &[
                    &["mma", "persistent", "tile_values", "specialize"][..],
                    &one_pass_forms
                ]
                .concat()
            )
        );
        let mma =
            crate::examples::source(&crate::examples::find("matmul/step2_pipelined").unwrap());
        let mma = compile(mma, &Default::default()).unwrap();
        assert_eq!(
            mma.passes.len(),
            count(
                &[
                    &["persistent", "tile_values", "specialize"][..],
                    &one_pass_forms
                ]
                .concat()
            ) + 1
        );
        let persistent = crate::examples::source(
            &crate::examples::find("matmul/step15_persistent_raster").unwrap(),
        );
        let persistent = compile(persistent, &Default::default()).unwrap();
        assert_eq!(
            persistent.passes.len(),
            count(&[&["specialize"][..], &one_pass_forms].concat()) + 1
        );
    }
}
