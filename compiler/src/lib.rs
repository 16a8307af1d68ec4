//! hopfuse: a lowering compiler for NVIDIA Hopper fusion kernels.
//!
//! Data flow (see `docs/ARCHITECTURE.md`):
//! program text → [`frontend`] (AST) → [`fusion`] (fusion IR + schedule) → [`passes`] (kernel IR,
//! one named pass at a time, printed after each) → [`codegen`] (CUDA source + [`plan::LaunchPlan`]).
//! [`reference`](mod@reference) evaluates the fusion's math in float64 for validation.
//! [`torch`] emits the same fusion as a PyTorch function (the *torch twin*).
//! [`pipeline_view`] describes the final kernel's TMA pipelines (roles, stages, barriers) as data,
//! from the [`passes::PipelinePlan`] and the kernel IR.
//!
//! A program without a `schedule { }` block gets the schedule [`auto`] writes for it (for the
//! sizes of [`CompileOptions::aligned_for`], else its `// bench:` line), and its launch plan
//! says which scheduler chose what and why ([`plan::AutoScheduleNote`]); a schedule of the
//! program's own always wins. [`compile_program`] also splits a fusion no scheduler takes whole
//! into several kernels ([`segment`]): a [`Compiled::Segmented`] with each kernel's
//! [`Compilation`] and a [`plan::SegmentedPlan`]; [`compile`] always emits one kernel.
//!
//! [`compile`] runs the pipeline, calls [`verify::after_pass`] after every pass (on in debug
//! builds, so in every `cargo test`; in release only with `HOPFUSE_VERIFY_IR=1`), and returns a
//! [`Compilation`]: the CUDA, the launch plan, the dump after every pass, the CUDA line map, the
//! kernel IR after the last pass and the pipeline plan and view. [`compile_choosing_index`]
//! lowers once and lets the caller pick the index type from the plan (the runner's 32-bit
//! index when every tensor has fewer than 2^31 elements). A compile inside a [`Cancel::scope`]
//! stops at the next schedule statement or pass once the scope's flag is set.
//!
//! Every walk over user-shaped structure is bounded or iterative, so any program within the
//! service's 64 KiB limit lowers (or is rejected with a located error) quickly on a 2 MiB
//! stack: [`frontend::parser::MAX_EXPR_OPS`] operations per statement,
//! [`fusion::build::MAX_FUSION_OPS`] per fusion, `fusion::transform::MAX_LOOP_AXES` loop axes
//! per tensor, `fusion::transform::MAX_DERIVATION_SIZE` split/merge steps per axis and
//! `fusion::transform::MAX_PROPAGATE_WORK` axis replays by a schedule's propagates.
//! `tests/src/lib.rs` generates the 64 KiB shapes, `tests/examples/fuzz.rs` is the long fuzz.

pub mod auto;
pub mod backend;
pub mod cancel;
pub mod cuda;
pub mod diag;
pub mod dtype;
pub mod examples;
pub mod frontend;
pub mod fusion;
pub mod id;
pub mod index_type;
pub mod kir;
pub mod passes;
pub mod plan;
pub mod segment;
pub mod target;
pub(crate) mod text;
pub mod verify;

pub use cancel::Cancel;
pub use diag::{Diagnostic, Diagnostics};
pub use dtype::DType;
pub use plan::{IndexType, LaunchPlan};

/// Options that change the emitted code.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Integer type of indices and size parameters. The runner picks `I32` when every tensor has
    /// fewer than 2^31 elements.
    pub index_type: IndexType,
    /// Specialise vector accesses for sizes that keep them aligned: no run-time alignment check,
    /// and the plan gets a divisibility constraint instead. The runner turns it on when the
    /// sizes it runs with satisfy those constraints (as it picks the index type).
    pub assume_aligned_vectors: bool,
    /// Specialise for the sizes the kernel will run with: each vector access whose alignment
    /// these sizes keep gets the aligned path (its divisibility becomes a plan constraint, which
    /// these sizes meet); the others keep the run-time check. One lowering then fits the sizes
    /// (what the runner uses; `assume_aligned_vectors` specialises every access regardless).
    /// A program without a schedule gets its automatic schedule decided for these sizes.
    pub aligned_for: Option<std::collections::BTreeMap<String, i64>>,
    /// Specialise the kernel to the sizes of `aligned_for` (which it then needs): every size
    /// symbol is its value in the kernel IR, so loop trip counts, grid and block are constants,
    /// splits those sizes divide need no bounds predicate and the index arithmetic folds. The
    /// size parameters stay in the kernel's signature (unused), so every launcher passes the
    /// same arguments; the plan gets one `Constraint::Equals` per symbol, which a launch at
    /// other sizes violates ([`plan::LaunchPlan::specialized_sizes`] reads them back).
    pub specialize: bool,
    /// Instrument the kernel for `hopfuse run --clock`: thread 0 of each of the first
    /// [`backend::codegen::clock_probe::CTAS`] CTAs records the SM cycles and nanoseconds from
    /// the kernel's entry to its end in the module global [`backend::codegen::clock_probe::SYMBOL`].
    /// Off by default: the CUDA a schedule lowers to carries no probe. Needs the crate's
    /// `clock-probe` feature (the runner's); without it, asking is an error.
    pub clock_probe: bool,
}

/// The kernel IR after one pass of the pipeline.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PassDump {
    pub name: &'static str,
    pub summary: &'static str,
    pub ir: String,
}

/// Everything one compilation produces.
#[derive(Clone, Debug)]
pub struct Compilation {
    pub cuda: String,
    pub plan: LaunchPlan,
    pub passes: Vec<PassDump>,
    /// The fusion as written (before scheduling): what [`backend::reference::evaluate`] runs.
    pub fusion: fusion::Fusion,
    /// The kernel's roles and circular-buffer pipelines, from the kernel IR after the last pass
    /// (empty without TMA or bulk loads).
    pub pipeline: backend::pipeline_view::PipelineView,
    /// For every line of `cuda`, what wrote it: for kernel-IR statements, their line in the
    /// last pass dump and the pass that produced that line.
    pub lines: backend::codegen::lines::LineMap,
    /// The kernel IR after the last pass (what the CUDA was emitted from).
    pub kernel: kir::Kernel,
    /// What the `tma` pass planned for the kernel's copies, pipelines and stores (and
    /// `allocation` completed), as the passes read it; the default without such features.
    pub pipeline_plan: passes::PipelinePlan,
}

/// The fusion as written (what [`backend::reference::evaluate`] runs), from the front end alone: no
/// scheduling, no lowering. For a caller that has the rest of a [`Compilation`] already.
pub fn reference_fusion(source: &str) -> Result<fusion::Fusion, Diagnostics> {
    let locate = |d: Diagnostic| Diagnostics::from(d.locate(source));
    let program = frontend::parse(source).map_err(locate)?;
    fusion::build(&program.fusion).map_err(locate)
}

/// Parses, schedules and lowers a program: the whole pipeline, with the kernel IR after each pass.
pub fn compile(source: &str, options: &CompileOptions) -> Result<Compilation, Diagnostics> {
    compile_choosing_index(source, options, |_| options.index_type)
}

/// [`compile`] with the index type chosen after lowering, from the plan (it changes only the
/// emitted code, so the program is lowered once): `choose` gets the plan emitted with
/// `options.index_type` and returns the type to emit with.
pub fn compile_choosing_index(
    source: &str,
    options: &CompileOptions,
    choose: impl FnOnce(&LaunchPlan) -> IndexType,
) -> Result<Compilation, Diagnostics> {
    let locate_all =
        |ds: Diagnostics| Diagnostics(ds.0.into_iter().map(|d| d.locate(source)).collect());
    if options.clock_probe && !cfg!(feature = "clock-probe") {
        return Err(Diagnostics::from(Diagnostic::new(
            "this build of hopfuse has no clock probe (the `clock-probe` feature)",
            None,
        )));
    }
    if options.specialize {
        let sizes = options.aligned_for.as_ref().ok_or_else(|| {
            Diagnostic::new(
                "specialising a kernel to its sizes needs the sizes (give every size symbol a value)",
                None,
            )
        })?;
        if let Some((symbol, value)) = sizes.iter().find(|(_, &v)| v < 1) {
            return Err(Diagnostics::from(Diagnostic::new(
                format!("cannot specialise the kernel to {symbol} = {value}: every size must be positive"),
                None,
            )));
        }
    }
    let Scheduled {
        fusion,
        mut scheduled,
        mut auto,
    } = schedule_for(source, options.aligned_for.as_ref())?;
    let lowered = match lower_all(&scheduled, options) {
        Err(errors) if auto.as_ref().is_some_and(|a| a.scheduler.is_some()) => {
            // The automatic schedule is the compiler's, not the user's: a lowering error in it
            // is stated in the plan and the kernel is the serial default.
            let note = auto.take().map(|a| plan::AutoScheduleNote {
                reason: format!(
                    "the automatic {} schedule did not lower ({}); compiled with the serial default",
                    a.scheduler.unwrap_or_default(),
                    errors.0.first().map_or("", |d| d.message.as_str())
                ),
                scheduler: None,
                schedule: a.schedule,
            });
            auto = note;
            scheduled = fusion.clone();
            lower_all(&scheduled, options)
        }
        other => other,
    };
    let (dumps, ir_lines, lowering) = lowered.map_err(|mut errors| {
        // The serial default of a fusion no scheduler took: say why there was no other, at the
        // error it explains (every diagnostic of a compile has a location when one does).
        if let Some(note) = auto.as_ref().filter(|a| a.scheduler.is_none()) {
            let at = errors.0.iter().find_map(|d| d.span);
            errors.0.push(Diagnostic::new(note.reason.clone(), at));
        }
        locate_all(errors)
    })?;
    let Lowering {
        cx,
        handoff,
        kernel,
    } = lowering;
    let pipeline_plan = handoff.plan;
    cancel::Cancel::check()?;
    let pipeline = backend::pipeline_view::extract(&kernel, &pipeline_plan);
    let mut constraints = handoff.constraints;
    if let Some(sizes) = &cx.options.specialized {
        constraints.extend(plan::specialized_constraints(&scheduled.symbols, sizes));
    }
    let block_bound = block_bound(&kernel, options.aligned_for.as_ref());
    let (mut cuda, mut plan, mut written) = backend::codegen::emit_mapped(
        &scheduled,
        &kernel,
        options.index_type,
        constraints.clone(),
        block_bound,
        options.clock_probe,
    );
    let index_type = choose(&plan);
    if index_type != options.index_type {
        (cuda, plan, written) = backend::codegen::emit_mapped(
            &scheduled,
            &kernel,
            index_type,
            constraints,
            block_bound,
            options.clock_probe,
        );
    }
    // A specialised kernel's sizes come first: a launch at other sizes is refused for that,
    // not for whichever other constraint those sizes happen to break.
    plan.constraints
        .sort_by_key(|c| !matches!(c, plan::Constraint::Equals { .. }));
    plan.matmul = fusion::matmul::detect(&fusion);
    plan.auto_schedule = auto;
    // The statement lines of the final dump (the last pass's `ir`), blamed on the kernel-IR
    // dumps (the first dump is the fusion IR).
    let kernel_dumps: Vec<(&str, &str)> =
        dumps[1..].iter().map(|d| (d.name, d.ir.as_str())).collect();
    let lines = backend::codegen::lines::LineMap::new(&written, &ir_lines, &kernel_dumps);
    Ok(Compilation {
        cuda,
        plan,
        passes: dumps,
        fusion,
        pipeline,
        lines,
        kernel,
        pipeline_plan,
    })
}

/// A program compiled by [`compile_program`]: one kernel, or several run in order.
#[derive(Clone, Debug)]
pub enum Compiled {
    One {
        compilation: Box<Compilation>,
        /// Set when the fusion has no scheduler and could not be segmented either: why (the
        /// kernel is then the serial default, as its plan's automatic-schedule note says).
        not_segmented: Option<String>,
    },
    Segmented(Box<Segmented>),
}

/// A fusion compiled to several kernels ([`segment`]).
#[derive(Clone, Debug)]
pub struct Segmented {
    pub segmentation: segment::Segmentation,
    /// Each segment's compilation, in the order they run (kernel `i` is segment `i`).
    pub kernels: Vec<Compilation>,
    /// The whole fusion as written: what [`backend::reference::evaluate`] runs for the final outputs.
    pub fusion: fusion::Fusion,
    pub plan: plan::SegmentedPlan,
}

impl Segmented {
    /// Every kernel's CUDA in turn, each under a header line naming it, its scheduler and why
    /// its segment ends there (what a single CUDA pane or answer shows of a split fusion).
    pub fn cuda_listing(&self) -> String {
        let n = self.kernels.len();
        let mut cuda = String::new();
        for (k, (c, seg)) in self
            .kernels
            .iter()
            .zip(&self.segmentation.segments)
            .enumerate()
        {
            cuda.push_str(&format!(
                "// ==== kernel {} of {n}: {} ({}): {}\n",
                k + 1,
                c.plan.kernel_name,
                seg.scheduler,
                seg.reason
            ));
            cuda.push_str(&c.cuda);
            if !cuda.ends_with('\n') {
                cuda.push('\n');
            }
        }
        cuda
    }
}

/// [`compile`], splitting a program without a schedule that no scheduler takes whole into
/// kernels that each one takes ([`segment::decide`]).
pub fn compile_program(source: &str, options: &CompileOptions) -> Result<Compiled, Diagnostics> {
    compile_program_choosing_index(source, options, |_| options.index_type)
}

/// [`compile_program`] with each kernel's index type chosen from its plan, as
/// [`compile_choosing_index`] does.
pub fn compile_program_choosing_index(
    source: &str,
    options: &CompileOptions,
    choose: impl Fn(&LaunchPlan) -> IndexType,
) -> Result<Compiled, Diagnostics> {
    let segmentation = match segment::decide(source, options.aligned_for.as_ref())? {
        segment::Decision::Split(s) => s,
        decision => {
            let not_segmented = match decision {
                segment::Decision::Declined(d) => Some(d.0),
                _ => None,
            };
            return Ok(Compiled::One {
                compilation: Box::new(compile_choosing_index(source, options, choose)?),
                not_segmented,
            });
        }
    };
    let mut kernels = Vec::new();
    for (k, seg) in segmentation.segments.iter().enumerate() {
        let compiled = compile_choosing_index(&seg.source, options, &choose).map_err(|ds| {
            // The segment's program is the compiler's: its errors name the segment and show
            // its text's line, not the user's.
            Diagnostics::from(Diagnostic::new(
                format!(
                    "segment {} of {} (`{}`) does not compile: {}",
                    k + 1,
                    segmentation.segments.len(),
                    seg.name,
                    ds.render(&seg.source, &seg.name)
                ),
                None,
            ))
        })?;
        kernels.push(compiled);
    }
    let fusion = reference_fusion(source)?;
    let plan = plan::SegmentedPlan {
        fusion: fusion.name.clone(),
        reason: segmentation.reason.clone(),
        kernels: segmentation
            .segments
            .iter()
            .zip(&kernels)
            .map(|(s, c)| plan::SegmentKernel {
                segment: s.name.clone(),
                scheduler: s.scheduler.clone(),
                reason: s.reason.clone(),
                reads: s.reads.clone(),
                writes: s.writes.clone(),
                plan: c.plan.clone(),
            })
            .collect(),
        intermediates: segmentation
            .intermediates
            .iter()
            .map(|m| plan::IntermediateTensor {
                name: m.name.clone(),
                dtype: m.dtype,
                shape: m.shape.clone(),
                bytes: m.bytes(),
                producer: m.producer,
                consumers: m.consumers.clone(),
            })
            .collect(),
    };
    Ok(Compiled::Segmented(Box::new(Segmented {
        segmentation,
        kernels,
        fusion,
        plan,
    })))
}

/// The threads of a block whose size only the launch knows, for the sizes a kernel is
/// specialised for: its `__launch_bounds__`, which caps the registers a thread may use (a
/// normalization schedule's block follows the row: 1024 would leave it 64 registers and spill
/// the row it keeps in registers). `None` without sizes, when the size is a constant, or when
/// they do not give a valid block (the plan's check then reports it).
fn block_bound(
    kernel: &kir::Kernel,
    sizes: Option<&std::collections::BTreeMap<String, i64>>,
) -> Option<i64> {
    let sizes = sizes?;
    if kernel.block.iter().all(|b| b.as_const().is_some()) {
        return None;
    }
    let threads = kernel
        .block
        .iter()
        .map(|b| b.eval(sizes).ok())
        .product::<Option<i64>>()?;
    (1..=target::MAX_THREADS_PER_BLOCK)
        .contains(&threads)
        .then_some(threads)
}

/// The passes of [`passes::PIPELINE`] over a scheduled fusion: the dump after each (the fusion
/// IR first), the statement lines of the last and the finished lowering; errors unlocated.
fn lower_all<'f>(
    scheduled: &'f fusion::Fusion,
    options: &CompileOptions,
) -> Result<(Vec<PassDump>, kir::IrLines, Lowering<'f>), Diagnostics> {
    let mut lowering = Lowering::new(scheduled, options);
    let mut dumps = vec![PassDump {
        name: "fusion",
        summary: "scheduled fusion IR",
        ir: fusion::print(scheduled),
    }];
    // The statement lines of the last dump (what the CUDA line map points into), recorded as
    // each dump is printed rather than printing the final kernel once more.
    let mut ir_lines = kir::IrLines::default();
    for pass in passes::PIPELINE {
        cancel::Cancel::check()?;
        let Some(change) = lowering.run(pass)? else {
            continue;
        };
        // A pass that changed nothing has the previous kernel pass's dump (and lines).
        let ir = match dumps.last() {
            Some(previous) if change == passes::Change::Unchanged && dumps.len() > 1 => {
                previous.ir.clone()
            }
            _ => {
                let ir;
                (ir, ir_lines) = lowering.kernel.print_with_lines();
                ir
            }
        };
        dumps.push(PassDump {
            name: pass.name,
            summary: pass.summary,
            ir,
        });
    }
    Ok((dumps, ir_lines, lowering))
}

/// A program's fusion as written and as its schedule leaves it (every syntax error, then every
/// independent schedule error: each stage recovers at statement boundaries), located. A
/// program without a schedule gets its automatic one, decided with no sizes but its
/// `// bench:` line ([`schedule_for`]).
pub fn schedule(source: &str) -> Result<(fusion::Fusion, fusion::Fusion), Diagnostics> {
    schedule_for(source, None).map(|s| (s.fusion, s.scheduled))
}

/// A program's fusion as written and as scheduled, with what [`auto`] decided when the program
/// has no schedule of its own.
pub struct Scheduled {
    pub fusion: fusion::Fusion,
    pub scheduled: fusion::Fusion,
    pub auto: Option<plan::AutoScheduleNote>,
}

/// [`schedule`] with the sizes an automatic schedule is decided for (else the program's
/// `// bench:` line, else defaults).
pub fn schedule_for(
    source: &str,
    sizes: Option<&std::collections::BTreeMap<String, i64>>,
) -> Result<Scheduled, Diagnostics> {
    let locate = |d: Diagnostic| Diagnostics::from(d.locate(source));
    let locate_all =
        |ds: Vec<Diagnostic>| Diagnostics(ds.into_iter().map(|d| d.locate(source)).collect());
    let program = frontend::parse_all(source).map_err(locate_all)?;
    // Scales of dequantized operands leave the sum (a tensor-core tile multiplies two operands).
    let program = frontend::dequantize::hoist_scales(&program);
    let fusion = fusion::build(&program.fusion).map_err(locate)?;
    let mut scheduled = fusion.clone();
    if !program.schedule.is_empty() {
        let schedule_errors = fusion::schedule::apply_all(&mut scheduled, &program.schedule);
        if !schedule_errors.is_empty() {
            return Err(locate_all(schedule_errors));
        }
        return Ok(Scheduled {
            fusion,
            scheduled,
            auto: None,
        });
    }
    let note = match auto::choose(&fusion, &auto::Sizes::resolve(sizes, source)) {
        Ok(chosen) => match auto_statements(&program.fusion, &chosen) {
            Ok(statements) => {
                let errors = fusion::schedule::apply_all(&mut scheduled, &statements);
                if errors.is_empty() {
                    plan::AutoScheduleNote {
                        scheduler: Some(chosen.scheduler.name().to_string()),
                        reason: chosen.reason,
                        schedule: Some(chosen.text),
                    }
                } else {
                    scheduled = fusion.clone();
                    plan::AutoScheduleNote {
                        scheduler: None,
                        reason: format!(
                            "the automatic {} schedule did not apply ({}); compiled with the serial default",
                            chosen.scheduler.name(),
                            errors[0].message
                        ),
                        schedule: Some(chosen.text),
                    }
                }
            }
            Err(message) => plan::AutoScheduleNote {
                scheduler: None,
                reason: message,
                schedule: Some(chosen.text),
            },
        },
        Err(declined) => plan::AutoScheduleNote {
            scheduler: None,
            reason: format!(
                "no automatic schedule ({}); compiled with the serial default",
                declined.reason
            ),
            schedule: None,
        },
    };
    Ok(Scheduled {
        fusion,
        scheduled,
        auto: Some(note),
    })
}

/// The statements of an automatic schedule, parsed after the canonical text of the program's
/// fusion (so their spans point into that text, not the user's).
fn auto_statements(
    fusion: &frontend::ast::FusionDef,
    chosen: &auto::AutoSchedule,
) -> Result<Vec<frontend::ast::SchedStmt>, String> {
    let program = frontend::Program {
        fusion: fusion.clone(),
        schedule: Vec::new(),
    };
    let text = format!("{}{}", frontend::print(&program), chosen.block());
    frontend::parse(&text)
        .map(|p| p.schedule)
        .map_err(|d| format!("the automatic schedule does not parse: {}", d.message))
}

/// The automatic schedule of a program for `sizes` (else its `// bench:` line, else defaults),
/// whether or not it has a schedule of its own (what `hopfuse schedule` prints): the
/// schedule, or why no scheduler takes the fusion.
pub fn auto_schedule(
    source: &str,
    sizes: Option<&std::collections::BTreeMap<String, i64>>,
) -> Result<Result<auto::AutoSchedule, auto::Declined>, Diagnostics> {
    let locate = |d: Diagnostic| Diagnostics::from(d.locate(source));
    let program = frontend::parse(source).map_err(locate)?;
    // As [`schedule_for`] decides: on the program with its dequantization scales hoisted.
    let program = frontend::dequantize::hoist_scales(&program);
    let fusion = fusion::build(&program.fusion).map_err(locate)?;
    Ok(auto::choose(&fusion, &auto::Sizes::resolve(sizes, source)))
}

/// The tuner's candidate schedules of a program for `sizes` (else its `// bench:` line, else
/// defaults), its automatic scheduler's own choice first ([`auto::candidates`]): what
/// `hopfuse tune` compiles, validates and times. A schedule of the program's own is ignored.
pub fn auto_candidates(
    source: &str,
    sizes: Option<&std::collections::BTreeMap<String, i64>>,
) -> Result<Result<Vec<auto::Candidate>, auto::Declined>, Diagnostics> {
    let locate = |d: Diagnostic| Diagnostics::from(d.locate(source));
    let program = frontend::parse(source).map_err(locate)?;
    let program = frontend::dequantize::hoist_scales(&program);
    let fusion = fusion::build(&program.fusion).map_err(locate)?;
    Ok(auto::candidates(
        &fusion,
        &auto::Sizes::resolve(sizes, source),
    ))
}

/// A lowering under way: the pass context, what the passes so far hand to later ones (the
/// pipeline plan, read after the last pass by the pipeline view, and the launch constraints,
/// by codegen) and the kernel, advanced one pass of [`passes::PIPELINE`] at a time.
/// [`compile`] runs every pass; the per-pass filetests run the passes before the one they test
/// for the context, then replace the kernel with their own text.
pub struct Lowering<'f> {
    pub cx: passes::Ctx<'f>,
    pub handoff: passes::Handoff,
    pub kernel: kir::Kernel,
}

impl<'f> Lowering<'f> {
    /// The empty kernel of a scheduled fusion, before the first pass.
    pub fn new(scheduled: &'f fusion::Fusion, options: &CompileOptions) -> Lowering<'f> {
        let cx = passes::Ctx::new(scheduled, passes::PassOptions::of(options));
        let kernel = kir::Kernel::empty(format!("{}_kernel", scheduled.name));
        Lowering {
            cx,
            handoff: passes::Handoff::default(),
            kernel,
        }
    }

    /// Runs `pass` on the kernel when it applies to the fusion (`Ok(None)` when it does not),
    /// then the verifier's checks after it; whether it changed the kernel. Errors are not
    /// located in the program text yet.
    pub fn run(&mut self, pass: &passes::Pass) -> Result<Option<passes::Change>, Diagnostics> {
        if !(pass.applies)(&self.cx) {
            return Ok(None);
        }
        let change = (pass.run)(&mut self.cx, &mut self.handoff, &mut self.kernel)?;
        verify::after_pass(pass.name, &self.kernel)?;
        Ok(Some(change))
    }
}

/// Parses a program and emits the PyTorch twin of its fusion ([`backend::torch::emit`]; the schedule is
/// checked by [`compile`], not here: a twin does not depend on it).
pub fn torch_twin(source: &str) -> Result<backend::torch::Twin, Diagnostics> {
    let locate = |d: Diagnostic| Diagnostics::from(d.locate(source));
    let program = frontend::parse(source).map_err(locate)?;
    let fusion = fusion::build(&program.fusion).map_err(locate)?;
    Ok(backend::torch::emit(&fusion, Some(&program.fusion)))
}
