//! Segmentation: a fusion that no automatic scheduler takes whole is split into an ordered list
//! of sub-fusions (segments), each of which one scheduler takes, with the tensors passed between
//! them written to and read from global memory (nvFuser's segmenter, at the statement level).
//!
//! Takes a program without a schedule whose whole fusion [`crate::auto`] declines (or whose
//! automatic schedule does not apply). Its statements are first made splittable: every
//! reduction written inside a larger expression becomes a statement of its own, named after the
//! statement it came from (`y = x / broadcast(sum(x, axis=0), axis=0)` becomes
//! `y_sum = sum(x, axis=0)` and `y = x / broadcast(y_sum, axis=0)`). Then, greedily from the
//! first statement, the longest run of statements that a scheduler takes (chosen and applied,
//! [`crate::schedule_for`]) is a segment, and the next statement's decline is the stated reason
//! for the split ("`y` reads the column reductions back over the columns ...").
//!
//! Guarantees: each segment is a program in the language ([`Segment::source`], printed by the
//! front end, with the original's `// bench:` lines) whose fusion a scheduler takes for the
//! sizes given; a tensor one segment writes and a later one reads is an [`Intermediate`] (an
//! output of the first, an input of the next) with the dtype the fusion gives it (so storing it
//! is exact: an f32 sum stays f32, a tensor the user cast to bf16 is stored as bf16) and a shape
//! of size symbols and integers. Running the segments in order computes the fusion's outputs.
//! Never panics; declines (None, with the reason logged in [`Declined`]) when a single
//! statement is taken by no scheduler, when an intermediate has an extent that is not a size
//! symbol or an integer, or a broadcast axis, or when the fusion has more than
//! [`MAX_STATEMENTS`] statements.
//!
//! Emits a [`Segmentation`]: the segments in order with their reasons, and the intermediates.

use crate::dtype::DType;
use crate::frontend::ast::{Arg, Dim, Expr, FusionDef, Item, Loc, Program};
use crate::fusion::{Fusion, IterKind};
use crate::plan::SizeExpr;
use std::collections::{BTreeMap, BTreeSet};

/// The most statements (after hoisting) the segmenter tries to split: the greedy search
/// schedules O(n^2) candidate sub-fusions, each a parse, a build and a scheduler's choice.
pub const MAX_STATEMENTS: usize = 64;

/// Calls that reduce over `axis=` (for `max` and `min`, only with `axis=`; without it they are
/// elementwise).
const REDUCTIONS: &[&str] = &[
    "sum",
    "prod",
    "any",
    "all",
    "mean",
    "var",
    "logsumexp",
    "argmax",
    "argmin",
    "max",
    "min",
];

/// One kernel of a segmented fusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The sub-fusion's name: the fusion's with `_s1`, `_s2`, ... (its kernel is `<name>_kernel`).
    pub name: String,
    /// The sub-fusion as a program without a schedule (the original's `// bench:` lines after
    /// it), compiled as any program is.
    pub source: String,
    /// The tensors it reads, as the user wrote them (fusion inputs and intermediates).
    pub reads: Vec<String>,
    /// The tensors it writes: intermediates and the fusion's outputs.
    pub writes: Vec<String>,
    /// The scheduler that takes it ([`crate::auto::Scheduler::name`]).
    pub scheduler: String,
    /// Why the segment ends where it does: the next statement's rule, or that it is the last.
    pub reason: String,
}

/// A tensor one segment writes to global memory and a later one reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intermediate {
    pub name: String,
    pub dtype: DType,
    /// Its extents, outermost first.
    pub shape: Vec<SizeExpr>,
    /// The segment (index) that writes it.
    pub producer: usize,
    /// The segments (indices) that read it.
    pub consumers: Vec<usize>,
}

impl Intermediate {
    /// Its size in bytes as an expression of the size symbols.
    pub fn bytes(&self) -> SizeExpr {
        self.shape.iter().fold(
            SizeExpr::Const(i64::from(self.dtype.size_bytes())),
            |acc, e| crate::plan::mul(acc, e.clone()),
        )
    }
}

/// A fusion split into kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segmentation {
    /// Why the whole fusion is not one kernel: the automatic scheduler's decline.
    pub reason: String,
    pub segments: Vec<Segment>,
    pub intermediates: Vec<Intermediate>,
}

/// Why a fusion was not segmented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declined(pub String);

/// What deciding a segmentation found: nothing to do (the program has its own schedule, or a
/// scheduler takes the fusion whole), a split, or why no split works.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Whole,
    Split(Segmentation),
    Declined(Declined),
}

/// Decides whether and how `source` is split, for `sizes` (else its `// bench:` line). Errors
/// are the program's own (syntax, types, schedule), located.
pub fn decide(
    source: &str,
    sizes: Option<&BTreeMap<String, i64>>,
) -> Result<Decision, crate::Diagnostics> {
    // Every syntax error, as `compile` reports them: the first alone would hide the others.
    let program = crate::frontend::parse_all(source)
        .map_err(|ds| crate::Diagnostics(ds.into_iter().map(|d| d.locate(source)).collect()))?;
    if !program.schedule.is_empty() {
        return Ok(Decision::Whole);
    }
    let whole = crate::schedule_for(source, sizes)?;
    let Some(note) = whole.auto.filter(|a| a.scheduler.is_none()) else {
        return Ok(Decision::Whole);
    };
    let reason = declined_reason(&note.reason);
    Ok(match split(&program, source, sizes, reason) {
        Ok(s) => Decision::Split(s),
        Err(d) => Decision::Declined(d),
    })
}

/// The scheduler's own sentence out of the note's wrapper
/// (`no automatic schedule (...); compiled with the serial default`).
fn declined_reason(note: &str) -> String {
    note.strip_prefix("no automatic schedule (")
        .and_then(|r| r.strip_suffix("); compiled with the serial default"))
        .unwrap_or(note)
        .to_string()
}

/// The statements of a fusion after hoisting: inputs, statements and outputs as written.
struct Statements {
    name: String,
    inputs: Vec<Item>,
    lets: Vec<(String, Expr)>,
    outputs: Vec<String>,
}

fn split(
    program: &Program,
    source: &str,
    sizes: Option<&BTreeMap<String, i64>>,
    reason: String,
) -> Result<Segmentation, Declined> {
    if let Some(Item::LetTuple { names, .. }) = program
        .fusion
        .items
        .iter()
        .find(|i| matches!(i, Item::LetTuple { .. }))
    {
        let names: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        return Err(Declined(format!(
            "`{}` is a tuple assignment, which the segmenter does not split yet",
            names.join(", ")
        )));
    }
    let st = hoist(&program.fusion);
    if st.lets.len() > MAX_STATEMENTS {
        return Err(Declined(format!(
            "the fusion has {} statements; the segmenter splits at most {MAX_STATEMENTS}",
            st.lets.len()
        )));
    }
    // The hoisted fusion, built once for the intermediates' dtypes and shapes.
    let hoisted = whole_program(&st);
    let fusion = crate::frontend::parse(&hoisted)
        .ok()
        .and_then(|p| crate::fusion::build(&p.fusion).ok())
        .ok_or_else(|| {
            Declined("the fusion with its reductions as statements does not build".into())
        })?;
    let bench: String = source
        .lines()
        .filter(|l| l.trim().starts_with(crate::auto::BENCH_PREFIX))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    let n = st.lets.len();
    let mut ranges: Vec<(usize, usize, String, String)> = Vec::new();
    let mut start = 0;
    while start < n {
        let mut taken = None;
        let mut longer_declined = None;
        for end in (start + 1..=n).rev() {
            let text = segment_text(&st, &fusion, start, end, 0, &bench)?;
            match try_schedule(&text, sizes) {
                Ok(scheduler) => {
                    taken = Some((end, scheduler));
                    break;
                }
                Err(why) => longer_declined = Some((end, why)),
            }
        }
        let Some((end, scheduler)) = taken else {
            let (_, why) = longer_declined.unwrap_or_default();
            return Err(Declined(format!(
                "no scheduler takes `{}` on its own ({why})",
                st.lets[start].0
            )));
        };
        let why = if end == n {
            "the last segment".to_string()
        } else {
            // The decline of the run one statement longer, found just before.
            let text = segment_text(&st, &fusion, start, end + 1, 0, &bench)?;
            let next = try_schedule(&text, sizes).err().unwrap_or_default();
            format!("ends before `{}`: with it, {next}", st.lets[end].0)
        };
        ranges.push((start, end, scheduler, why));
        start = end;
    }
    if ranges.len() < 2 {
        return Err(Declined(
            "every statement fits one segment, yet the whole fusion is declined".into(),
        ));
    }
    let segment_of = |let_index: usize| ranges.iter().position(|r| let_index < r.1).unwrap_or(0);
    let mut segments = Vec::new();
    let mut intermediates: Vec<Intermediate> = Vec::new();
    for (k, (start, end, scheduler, why)) in ranges.iter().enumerate() {
        let source = segment_text(&st, &fusion, *start, *end, k + 1, &bench)?;
        let (reads, writes) = interface(&st, *start, *end);
        for r in &reads {
            if let Some(i) = st.lets.iter().position(|(n, _)| n == r) {
                let producer = segment_of(i);
                match intermediates.iter_mut().find(|m| &m.name == r) {
                    Some(m) => m.consumers.push(k),
                    None => {
                        let (dtype, shape) = tensor_type(&fusion, r)?;
                        intermediates.push(Intermediate {
                            name: r.clone(),
                            dtype,
                            shape,
                            producer,
                            consumers: vec![k],
                        });
                    }
                }
            }
        }
        segments.push(Segment {
            name: format!("{}_s{}", st.name, k + 1),
            source,
            reads,
            writes,
            scheduler: scheduler.clone(),
            reason: why.clone(),
        });
    }
    intermediates.sort_by_key(|m| (m.producer, m.name.clone()));
    Ok(Segmentation {
        reason,
        segments,
        intermediates,
    })
}

/// The scheduler that takes the program `text` (chosen and applied), or why none does.
fn try_schedule(text: &str, sizes: Option<&BTreeMap<String, i64>>) -> Result<String, String> {
    let scheduled = crate::schedule_for(text, sizes)
        .map_err(|d| d.0.first().map_or_else(String::new, |d| d.message.clone()))?;
    match scheduled.auto {
        Some(crate::plan::AutoScheduleNote {
            scheduler: Some(s), ..
        }) => Ok(s),
        Some(note) => Err(declined_reason(&note.reason)),
        None => Err("the sub-fusion has a schedule of its own".into()),
    }
}

/// The names a statement reads (tensor names among `known`).
fn reads_of(e: &Expr, known: &BTreeSet<&str>, out: &mut Vec<String>) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match e {
            Expr::Name(n, _) => {
                if known.contains(n.as_str()) && !out.contains(n) {
                    out.push(n.clone());
                }
            }
            Expr::Int(..) | Expr::Float(..) => {}
            Expr::Neg(x, _) => stack.push(x),
            Expr::Binary(_, l, r, _) => {
                stack.push(r);
                stack.push(l);
            }
            Expr::Call { args, .. } => {
                for a in args.iter().rev() {
                    match a {
                        Arg::Pos(x) | Arg::Named { value: x, .. } => stack.push(x),
                    }
                }
            }
            Expr::List(items, _) => stack.extend(items.iter().rev()),
        }
    }
}

/// Every tensor name of the fusion (inputs and statements).
fn tensor_names(st: &Statements) -> BTreeSet<&str> {
    st.inputs
        .iter()
        .filter_map(|i| match i {
            Item::Input { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .chain(st.lets.iter().map(|(n, _)| n.as_str()))
        .collect()
}

/// What statements `start..end` read from outside (fusion inputs in declaration order, then
/// earlier statements in order) and write for others (later statements' reads and the fusion's
/// outputs, in statement order).
fn interface(st: &Statements, start: usize, end: usize) -> (Vec<String>, Vec<String>) {
    let known = tensor_names(st);
    let mut read = Vec::new();
    for (_, e) in &st.lets[start..end] {
        reads_of(e, &known, &mut read);
    }
    let inside: BTreeSet<&str> = st.lets[start..end]
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    let mut reads: Vec<String> = st
        .inputs
        .iter()
        .filter_map(|i| match i {
            Item::Input { name, .. } if read.contains(name) => Some(name.clone()),
            _ => None,
        })
        .collect();
    reads.extend(
        st.lets[..start]
            .iter()
            .filter(|(n, _)| read.contains(n))
            .map(|(n, _)| n.clone()),
    );
    let mut later = Vec::new();
    for (_, e) in &st.lets[end..] {
        reads_of(e, &known, &mut later);
    }
    let writes = st.lets[start..end]
        .iter()
        .map(|(n, _)| n)
        .filter(|n| inside.contains(n.as_str()) && (later.contains(n) || st.outputs.contains(n)))
        .cloned()
        .collect();
    (reads, writes)
}

/// The dtype and the shape (size symbols and integers) of tensor `name` of the hoisted fusion,
/// as an intermediate declares it.
fn tensor_type(f: &Fusion, name: &str) -> Result<(DType, Vec<SizeExpr>), Declined> {
    let t = f
        .tensor_by_name(name)
        .ok_or_else(|| Declined(format!("`{name}` is not a tensor of the fusion")))?;
    let mut shape = Vec::new();
    for a in f.logical(t) {
        if f.ids[a].kind == IterKind::Broadcast {
            return Err(Declined(format!(
                "the intermediate `{name}` has a broadcast axis; broadcast where it is read instead"
            )));
        }
        let e = f.class_extent(f.class_of(a));
        if !matches!(e, SizeExpr::Sym(_) | SizeExpr::Const(_)) {
            return Err(Declined(format!(
                "the intermediate `{name}` has the extent `{e}`, not a size symbol or an integer, so a segment cannot declare it as an input"
            )));
        }
        shape.push(e);
    }
    Ok((f.tensors[t].dtype, shape))
}

/// The program of statements `start..end` as a fusion named `<name>_s<number>` (0: a candidate),
/// followed by the original's `bench` lines.
fn segment_text(
    st: &Statements,
    f: &Fusion,
    start: usize,
    end: usize,
    number: usize,
    bench: &str,
) -> Result<String, Declined> {
    let (reads, writes) = interface(st, start, end);
    let mut items = Vec::new();
    for r in &reads {
        match st
            .inputs
            .iter()
            .find(|i| matches!(i, Item::Input { name, .. } if name == r))
        {
            Some(input) => items.push(input.clone()),
            None => {
                let (dtype, shape) = tensor_type(f, r)?;
                let dims = shape
                    .iter()
                    .map(|e| match e {
                        SizeExpr::Const(c) => Dim::Const(*c),
                        other => Dim::Sym(other.to_string()),
                    })
                    .collect();
                items.push(Item::Input {
                    name: r.clone(),
                    dtype,
                    dims: Some(dims),
                    value: None,
                    loc: Loc::default(),
                });
            }
        }
    }
    // Scalar inputs with values are read by name like tensors; unread ones are left out.
    for (name, value) in &st.lets[start..end] {
        items.push(Item::Let {
            name: name.clone(),
            value: value.clone(),
            loc: Loc::default(),
        });
    }
    for w in &writes {
        items.push(Item::Output {
            name: w.clone(),
            loc: Loc::default(),
        });
    }
    let name = match number {
        0 => format!("{}_segment", st.name),
        k => format!("{}_s{k}", st.name),
    };
    let program = Program {
        fusion: FusionDef { name, items },
        schedule: Vec::new(),
    };
    Ok(format!("{}{bench}", crate::frontend::print(&program)))
}

/// The hoisted fusion whole, as a program (to build its tensors' types).
fn whole_program(st: &Statements) -> String {
    let mut items = st.inputs.clone();
    items.extend(st.lets.iter().map(|(name, value)| Item::Let {
        name: name.clone(),
        value: value.clone(),
        loc: Loc::default(),
    }));
    items.extend(st.outputs.iter().map(|name| Item::Output {
        name: name.clone(),
        loc: Loc::default(),
    }));
    crate::frontend::print(&Program {
        fusion: FusionDef {
            name: st.name.clone(),
            items,
        },
        schedule: Vec::new(),
    })
}

/// `fusion` with every reduction inside a larger expression moved to a statement of its own,
/// named `<statement>_<op>` (with a number when taken), innermost first.
fn hoist(fusion: &FusionDef) -> Statements {
    let mut taken: BTreeSet<String> = fusion
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Input { name, .. } | Item::Let { name, .. } => Some(name.clone()),
            // Declined before hoisting (`split`).
            Item::LetTuple { .. } | Item::Output { .. } => None,
        })
        .collect();
    let mut st = Statements {
        name: fusion.name.clone(),
        inputs: Vec::new(),
        lets: Vec::new(),
        outputs: Vec::new(),
    };
    for item in &fusion.items {
        match item {
            Item::Input { .. } => st.inputs.push(item.clone()),
            Item::Output { name, .. } => st.outputs.push(name.clone()),
            Item::Let { name, value, .. } => {
                let mut hoisted = Vec::new();
                let value = hoist_expr(value, name, true, &mut taken, &mut hoisted);
                st.lets.extend(hoisted);
                st.lets.push((name.clone(), value));
            }
            // Declined before hoisting (`split`).
            Item::LetTuple { .. } => {}
        }
    }
    st
}

fn is_reduction(e: &Expr) -> bool {
    let Expr::Call { func, args, .. } = e else {
        return false;
    };
    REDUCTIONS.contains(&func.as_str())
        && args
            .iter()
            .any(|a| matches!(a, Arg::Named { name, .. } if name == "axis" || name == "axes"))
}

/// `e` with its nested reductions replaced by names of new statements (pushed to `out` in
/// order); `top`: `e` is a statement's whole value, which stays where it is.
fn hoist_expr(
    e: &Expr,
    stmt: &str,
    top: bool,
    taken: &mut BTreeSet<String>,
    out: &mut Vec<(String, Expr)>,
) -> Expr {
    // Expressions are bounded by the parser's MAX_EXPR_OPS, so recursion depth is bounded.
    let rebuilt = match e {
        Expr::Neg(x, l) => Expr::Neg(Box::new(hoist_expr(x, stmt, false, taken, out)), *l),
        Expr::Binary(op, a, b, l) => Expr::Binary(
            *op,
            Box::new(hoist_expr(a, stmt, false, taken, out)),
            Box::new(hoist_expr(b, stmt, false, taken, out)),
            *l,
        ),
        Expr::Call { func, args, loc } => Expr::Call {
            func: func.clone(),
            args: args
                .iter()
                .map(|a| match a {
                    Arg::Pos(x) => Arg::Pos(hoist_expr(x, stmt, false, taken, out)),
                    Arg::Named { .. } => a.clone(),
                })
                .collect(),
            loc: *loc,
        },
        other => other.clone(),
    };
    if top || !is_reduction(&rebuilt) {
        return rebuilt;
    }
    let Expr::Call { func, .. } = &rebuilt else {
        return rebuilt;
    };
    let mut name = format!("{stmt}_{func}");
    let mut k = 2;
    while taken.contains(&name) {
        name = format!("{stmt}_{func}{k}");
        k += 1;
    }
    taken.insert(name.clone());
    out.push((name.clone(), rebuilt));
    Expr::Name(name, Loc::default())
}

#[cfg(test)]
mod tests;
