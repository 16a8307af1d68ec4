//! CUDA back end: kernel IR → one self-contained `.cu` source and its [`LaunchPlan`].
//!
//! The source holds an index typedef, the prelude helpers the kernel uses and one
//! `extern "C" __global__` kernel taking its tensors (inputs, outputs, global scratch), then its
//! size symbols and scalars, in the order the plan lists them; each TMA tensor map is a
//! `Param::TensorMap`, passed as a 128-byte `const __grid_constant__ hf_tensor_map` after the
//! sizes. The kernel has `__launch_bounds__` (the block's threads, else 1024; one block per SM
//! with register sharing) and dynamic shared memory. The plan gives grid, block and shared
//! memory as `SizeExpr`s over the size symbols, the run-time constraints, the tensor maps
//! (`TensorMapSpec`, innermost first) and the register sharing.
//!
//! A thread index that is constant within a warp (`threadIdx.y` when `blockDim.x` is whole
//! warps, `threadIdx.z` when `blockDim.x * blockDim.y` is: the verifier's rule,
//! `verify::of_hw`) is broadcast from lane 0 with `__shfl_sync`, so ptxas keeps what is computed
//! from it (a warp group's descriptors and slot addresses) in uniform registers. A wgmma
//! operand's descriptor in unrolled loops is built once plus a constant per iteration (see
//! `Emitter::descriptor`). Statements are here, loops in `loops.rs`, expressions in `expr.rs`,
//! the helpers and which of them a kernel uses in `prelude.rs`, stream-K's workspace and
//! hand-over in `stream_k.rs`, the clock probe in `clock_probe.rs`, the line map in `lines.rs`.

pub mod clock_probe;
mod expr;
pub mod lines;
mod loops;
pub mod prelude;
mod stream_k;

use crate::dtype::DType;
use crate::fusion::{Fusion, MemoryType, ParallelType, ReduceOp};
use crate::kir::{Access, BufferId, Compute, Data, Kernel, Stmt, Val};
use crate::plan::{Constraint, IndexType, LaunchPlan, Param, SizeExpr, TensorRole};
use crate::verify::Uniformity;
use lines::Written;
use prelude::Uses;
use std::fmt::Write;

pub fn emit(
    f: &Fusion,
    k: &Kernel,
    index_type: IndexType,
    constraints: Vec<Constraint>,
) -> (String, LaunchPlan) {
    let (src, plan, _) = emit_mapped(f, k, index_type, constraints, false);
    (src, plan)
}

/// [`emit`], and what wrote each line of the source (one entry per line; see [`lines`]).
/// `clock_probe`: thread 0 of each CTA records the SM cycles and nanoseconds of its run in the
/// module global [`clock_probe::SYMBOL`] (`CompileOptions::clock_probe`).
pub fn emit_mapped(
    f: &Fusion,
    k: &Kernel,
    index_type: IndexType,
    constraints: Vec<Constraint>,
    clock_probe: bool,
) -> (String, LaunchPlan, Vec<Written>) {
    // Constant without the feature: the probe's code and text are left out of the build.
    let clock_probe = clock_probe && cfg!(feature = "clock-probe");
    let mut e = Emitter {
        k,
        out: String::new(),
        uses: Uses::default(),
        consumer_threads: None,
        written: Vec::new(),
        current: Written::Setup,
        next_stmt: 0,
        scratch: String::new(),
        unrolled: Vec::new(),
        clock_roles: clock_probe
            .then(|| clock_probe::record_in_roles(k))
            .flatten(),
    };
    let mut body = String::new();
    std::mem::swap(&mut e.out, &mut body);
    e.block(&k.body, 1);
    std::mem::swap(&mut e.out, &mut body);

    // Parameters.
    let mut params = Vec::new();
    let mut decls = Vec::new();
    let tensor_param =
        |b: BufferId, role: TensorRole, params: &mut Vec<Param>, decls: &mut Vec<String>| {
            let buf = &k.buffers[b];
            let shape = buf
                .global_shape
                .iter()
                .map(|(e, bc)| if *bc { SizeExpr::Const(1) } else { e.clone() })
                .collect();
            params.push(Param::Tensor {
                name: buf.name.clone(),
                dtype: buf.dtype,
                role,
                shape,
            });
            let c = if role == TensorRole::Input {
                "const "
            } else {
                ""
            };
            decls.push(format!(
                "{c}{}* __restrict__ {}",
                storage(buf.dtype),
                buf.name
            ));
        };
    let uses = f.use_index();
    for &t in &f.inputs {
        if f.rank(t) == 0 {
            if !uses[t].is_empty() {
                let tensor = &f.tensors[t];
                params.push(Param::Scalar {
                    name: tensor.name.clone(),
                    dtype: tensor.dtype,
                });
                decls.push(format!(
                    "{} {}",
                    storage(tensor.dtype.compute()),
                    tensor.name
                ));
            }
        } else if let Some(b) = k.buffer_ids().find(|&b| k.buffers[b].tensor == Some(t)) {
            tensor_param(b, TensorRole::Input, &mut params, &mut decls);
        }
    }
    for &t in &f.outputs {
        if let Some(b) = k.buffer_ids().find(|&b| k.buffers[b].tensor == Some(t)) {
            tensor_param(b, TensorRole::Output, &mut params, &mut decls);
        }
    }
    for (b, buf) in k.buffer_ids().zip(&k.buffers) {
        if buf.memory == MemoryType::Global
            && !buf.is_input
            && buf.tensor.is_some_and(|t| !f.tensors[t].is_output)
        {
            tensor_param(b, TensorRole::Scratch, &mut params, &mut decls);
        }
    }
    if let Some((param, decl)) = stream_k::workspace_param(k) {
        params.push(param);
        decls.push(decl);
    }
    for s in &f.symbols {
        params.push(Param::Size { symbol: s.clone() });
        decls.push(format!("index_t {s}"));
    }
    for (i, m) in k.tensor_maps.iter().enumerate() {
        params.push(Param::TensorMap {
            name: m.param.clone(),
            map: i,
        });
        decls.push(format!("const __grid_constant__ hf_tensor_map {}", m.param));
    }

    let kernel_name = format!("{}_kernel", f.name);
    let threads: Option<i64> = k.block.iter().map(|b| b.as_const()).product();
    let mut src = String::new();
    let _ = writeln!(src, "// Generated by hopfuse from fusion `{}`.", f.name);
    let _ = writeln!(src, "typedef {} index_t;", index_type.cuda());
    // A storage type every buffer of that type needs, even when no value is converted (the
    // operands of a tensor-core product are read through descriptors only).
    for b in &k.buffers {
        match b.dtype {
            DType::BF16 => e.uses.bf16 = true,
            DType::F16 => e.uses.f16 = true,
            _ => {}
        }
    }
    e.uses.clock_probe = clock_probe;
    e.uses.write_prelude(!k.tensor_maps.is_empty(), &mut src);
    src.push('\n');
    let signature_line = lines::count(&src);
    // A block size known only at run time is still at most 1024 threads (the plan checks it).
    // setmaxnreg needs one block per SM: `__launch_bounds__(threads, 1)`.
    let bounds = match k.register_sharing {
        Some(_) => format!("__launch_bounds__({}, 1) ", threads.unwrap_or(1024)),
        None => format!("__launch_bounds__({}) ", threads.unwrap_or(1024)),
    };
    // A kernel with compile-time cluster dimensions is launched in clusters by a plain launch.
    let cluster_dims = k
        .cluster
        .map(|c| format!("__cluster_dims__({}, {}, {}) ", c[0], c[1], c[2]))
        .unwrap_or_default();
    let _ = writeln!(
        src,
        "extern \"C\" __global__ void {cluster_dims}{bounds}{kernel_name}("
    );
    let _ = writeln!(src, "    {}) {{", decls.join(",\n    "));
    let setup_line = lines::count(&src);
    if k.dynamic_smem != SizeExpr::Const(0) {
        // TMA boxes need 128-byte aligned shared memory, swizzled ones 1024 bytes.
        let align = if k.tensor_maps.iter().any(|m| m.swizzle_bytes != 0) {
            1024
        } else if k.mbarriers.is_empty() {
            16
        } else {
            128
        };
        let _ = writeln!(
            src,
            "  extern __shared__ __align__({align}) unsigned char hf_smem[];"
        );
    }
    for m in &k.mbarriers {
        let mut off = String::new();
        m.smem_offset
            .as_ref()
            .unwrap_or(&Val::Int(0))
            .write(&mut off, true);
        let _ = writeln!(
            src,
            "  unsigned long long* {} = reinterpret_cast<unsigned long long*>(hf_smem + {off});  // {} mbarriers",
            m.name, m.count
        );
    }
    if e.uses.warp {
        // Warp-uniform by construction: broadcast from lane 0, so the compiler keeps it in a
        // uniform register and predicates on it never split a warp.
        let linear = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))";
        let _ = writeln!(
            src,
            "  const unsigned hf_warp = __shfl_sync(0xffffffffu, {linear} / 32u, 0);"
        );
    }
    if !e.uses.multicast_ranks.is_empty() {
        let _ = writeln!(
            src,
            "  const index_t {} = hf_cluster_ctarank();",
            crate::kir::CTA_RANK
        );
    }
    if clock_probe {
        // First, so the probe spans the whole kernel.
        src.push_str(clock_probe::ENTRY);
    }
    let bindings_line = lines::count(&src);
    for (var, p) in &k.hw_vars {
        // A thread index every lane of a warp shares (the verifier's uniformity rule) is
        // broadcast from lane 0 (every thread is here, converged): ptxas then knows it is
        // warp-uniform and keeps what is computed from it (a warp group's operand descriptors,
        // its slot addresses) in uniform registers.
        let index = p.cuda_index().unwrap_or("0");
        let value = if crate::verify::of_hw(k, *p) == Uniformity::Warp {
            from_lane0(index)
        } else {
            index.to_string()
        };
        let _ = writeln!(src, "  const index_t {var} = {value};");
    }
    src.push_str(&body);
    if clock_probe && e.clock_roles.is_none() {
        // Generated kernels have no early return: every thread that gets here ran the body.
        let _ = writeln!(src, "  {}", clock_probe::RECORD);
    }
    src.push_str("}\n");
    let mut written = vec![Written::Prelude; signature_line];
    written.resize(setup_line, Written::Signature);
    written.resize(bindings_line, Written::Setup);
    written.extend((0..k.hw_vars.len()).map(Written::Binding));
    written.append(&mut e.written);
    if clock_probe && e.clock_roles.is_none() {
        written.push(Written::Setup);
    }
    written.push(Written::Signature);
    debug_assert_eq!(written.len(), lines::count(&src));

    let min_global_bytes = params
        .iter()
        .filter_map(|p| match p {
            Param::Tensor {
                dtype, role, shape, ..
            } if !matches!(role, TensorRole::Scratch | TensorRole::Workspace) => {
                Some(shape.iter().cloned().fold(
                    SizeExpr::Const(dtype.size_bytes() as i64),
                    crate::passes::mul,
                ))
            }
            _ => None,
        })
        .reduce(|a, b| SizeExpr::Add(Box::new(a), Box::new(b)))
        .unwrap_or(SizeExpr::Const(0));
    let mut constraints = constraints;
    if threads.is_none() {
        let total = k
            .block
            .iter()
            .cloned()
            .fold(SizeExpr::Const(1), crate::passes::mul);
        constraints.push(Constraint::AtMost {
            value: total,
            max: 1024,
            reason: "threads per block".into(),
        });
    }
    let plan = LaunchPlan {
        kernel_name,
        index_type,
        symbols: f.symbols.clone(),
        params,
        grid: k.grid.clone(),
        block: k.block.clone(),
        dynamic_smem_bytes: k.dynamic_smem.clone(),
        constraints,
        tensor_maps: k.tensor_maps.clone(),
        register_sharing: k
            .register_sharing
            .map(|(producer, consumer)| crate::plan::RegisterSharing { producer, consumer }),
        cluster: k.cluster,
        min_global_bytes,
        matmul: None,
        persistent: k.persistent.as_ref().map(|p| crate::plan::PersistentGrid {
            along: p.along.to_string(),
            group: p.group,
            stream_k: p.stream_k.as_ref().map(|sk| sk.work_size.clone()),
        }),
    };
    (src, plan, written)
}

struct Emitter<'a> {
    k: &'a Kernel,
    out: String,
    uses: Uses,
    /// Inside the consumer branch of a warp-specialized kernel: block barriers are named
    /// barriers over this many threads (the producers have left).
    consumer_threads: Option<i64>,
    /// What wrote each line of `out` (the line map).
    written: Vec<Written>,
    /// The statement whose lines are being written.
    current: Written,
    /// The preorder number of the next statement [`Emitter::block`] visits (the order of
    /// `kir::IrLines::stmts`).
    next_stmt: usize,
    /// A reused buffer for a condition's or a destination's text (one string per statement
    /// otherwise).
    scratch: String,
    /// The variables of the enclosing `#pragma unroll` loops of constant extent, innermost last.
    unrolled: Vec<String>,
    /// The warp roles whose consumers' branch ends with the clock probe's record
    /// ([`clock_probe::record_in_roles`]).
    clock_roles: Option<&'a Stmt>,
}

fn storage(d: DType) -> &'static str {
    match d {
        DType::BF16 => "hf_bf16",
        DType::F16 => "hf_f16",
        d => d.cuda(),
    }
}

impl Emitter<'_> {
    fn line(&mut self, depth: usize, s: &str) {
        self.written.push(self.current);
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// One line from its pieces (no string formatted for it first).
    fn line_parts(&mut self, depth: usize, parts: &[&str]) {
        self.written.push(self.current);
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        for p in parts {
            self.out.push_str(p);
        }
        self.out.push('\n');
    }

    /// A wgmma operand's matrix descriptor. Inside unrolled loops the operand's start usually
    /// moves by a constant per iteration (the k16 steps of a k tile): the descriptor is then
    /// built once, at the loops' first iteration, and each iteration adds its offset in 16-byte
    /// units. NVCC cannot see through the masked shift in `hf_wgmma_desc`, so the plain form
    /// costs a dozen instructions per wgmma. Exact: the start address stays below 2^18, so the
    /// sum never carries out of the descriptor's 14-bit address field.
    fn descriptor(&mut self, tile: &Access, bits: u64) -> String {
        let bytes = i64::from(self.k.buffers[tile.buffer].dtype.size_bytes());
        let mut first = tile.clone();
        let mut steps = String::new();
        for var in &self.unrolled {
            let Some(index) = &first.index else { break };
            match index
                .linear_coefficient(var)
                .and_then(|c| c.checked_mul(bytes))
            {
                Some(0) => {}
                Some(b) if b % 16 == 0 => {
                    first.index = Some(index.subst(var, &Val::Int(0)));
                    let _ = write!(steps, " + {} * {var}", b / 16);
                }
                _ => return format!("hf_wgmma_desc(&{}, {bits:#x}ull)", self.access(tile)),
            }
        }
        if let Some(i) = &first.index {
            first.index = Some(crate::passes::simplify::simplify(i, &Default::default()));
        }
        let a = self.access(&first);
        format!("(hf_wgmma_desc(&{a}, {bits:#x}ull){steps})")
    }

    fn val(&mut self, v: &Val) -> String {
        let mut out = String::new();
        self.write_val(v, &mut out);
        out
    }

    /// Appends the CUDA text of `v` to `out`, noting the helpers it needs.
    fn write_val(&mut self, v: &Val, out: &mut String) {
        self.uses.ceil_div |= v.has_ceil_div();
        self.uses.min |= v.has_min();
        self.uses.warp |= v.mentions_warp();
        v.write(out, true);
    }

    /// The rank and the `(int)`-cast coordinates of a box origin, innermost first.
    fn box_coords(&mut self, coords: &[Val]) -> (usize, String) {
        let list: Vec<String> = coords
            .iter()
            .map(|c| format!("(int)({})", strip_parens(self.val(c))))
            .collect();
        (list.len(), list.join(", "))
    }

    /// `&bars[slot]` (and the TMA prelude is needed).
    fn barrier(&mut self, bars: usize, slot: &Val) -> String {
        self.uses.tma = true;
        let name = self.k.mbarriers[bars].name.clone();
        let slot = strip_parens(self.val(slot));
        format!("&{name}[{slot}]")
    }

    fn access(&mut self, a: &Access) -> String {
        let name = &self.k.buffers[a.buffer].name;
        let mut out = String::with_capacity(name.len() + 16);
        out.push_str(name);
        out.push('[');
        match &a.index {
            Some(i) => self.write_val(i, &mut out),
            None => out.push('0'),
        }
        out.push(']');
        out
    }

    fn compute(&mut self, c: &Compute, depth: usize) {
        if let Some((_, w)) = &c.vector {
            self.uses.vector = true;
            let dst = &self.k.buffers[c.out.buffer];
            let ty = storage(dst.dtype);
            let dst_access = self.access(&c.out);
            let Data::Read(src) = &c.value else { return };
            let src_access = self.access(src);
            let line = format!(
                "*reinterpret_cast<hf_vec<{ty}, {w}>*>(&{dst_access}) = *reinterpret_cast<const hf_vec<{ty}, {w}>*>(&{src_access});"
            );
            self.line(depth, &line);
            return;
        }
        let (e, from) = self.data(&c.value);
        let to = self.k.buffers[c.out.buffer].dtype;
        let v = self.conv(e, from, to);
        let dst = self.access(&c.out);
        self.line_parts(depth, &[&dst, " = ", strip_parens_str(&v), ";"]);
    }

    fn block(&mut self, body: &[Stmt], depth: usize) {
        // Lines after a nested block (a closing brace) belong to the statement holding it.
        let holder = self.current;
        for s in body {
            self.current = Written::Stmt(self.next_stmt);
            self.next_stmt += 1;
            match s {
                Stmt::Loop(l) => self.loop_stmt(l, depth),
                Stmt::WarpRoles {
                    is_producer,
                    producer,
                    consumer,
                    registers,
                    consumer_threads,
                } => {
                    let c = self.val(is_producer);
                    self.line(
                        depth,
                        &format!("if ({}) {{  // producer warp group", strip_parens(c)),
                    );
                    if let Some((p, _)) = registers {
                        self.line(
                            depth + 1,
                            &format!("asm volatile(\"setmaxnreg.dec.sync.aligned.u32 {p};\");"),
                        );
                    }
                    // Constant without the feature, so the playground's wasm leaves this out.
                    let clock = cfg!(feature = "clock-probe")
                        && self.clock_roles.is_some_and(|r| std::ptr::eq(r, s));
                    self.block(producer, depth + 1);
                    self.line(depth, "} else {  // consumer warps");
                    if let Some((_, c)) = registers {
                        self.line(
                            depth + 1,
                            &format!("asm volatile(\"setmaxnreg.inc.sync.aligned.u32 {c};\");"),
                        );
                    }
                    let outer = self.consumer_threads.replace(*consumer_threads);
                    self.block(consumer, depth + 1);
                    self.consumer_threads = outer;
                    if clock {
                        self.line(depth + 1, clock_probe::RECORD);
                    }
                    self.line(depth, "}");
                }
                Stmt::If { cond, then, els } => {
                    let mut c = std::mem::take(&mut self.scratch);
                    c.clear();
                    self.write_val(cond, &mut c);
                    self.line_parts(depth, &["if (", strip_parens_str(&c), ") {"]);
                    self.scratch = c;
                    self.block(then, depth + 1);
                    if els.is_empty() {
                        self.line(depth, "}");
                    } else {
                        self.line(depth, "} else {");
                        self.block(els, depth + 1);
                        self.line(depth, "}");
                    }
                }
                Stmt::Alloc(b) => {
                    let buf = &self.k.buffers[*b];
                    let size = buf
                        .size
                        .as_ref()
                        .map(|s| self.val(s))
                        .unwrap_or_else(|| "1".into());
                    let ty = storage(buf.dtype);
                    match buf.memory {
                        MemoryType::Local => {
                            let name = self.k.buffers[*b].name.as_str();
                            self.line_parts(
                                depth,
                                &["alignas(16) ", ty, " ", name, "[", &size, "];"],
                            );
                        }
                        MemoryType::Shared => {
                            let off = buf
                                .smem_offset
                                .as_ref()
                                .map(|o| self.val(o))
                                .unwrap_or_else(|| "0".into());
                            let name = buf.name.clone();
                            self.line(depth, &format!("{ty}* {name} = reinterpret_cast<{ty}*>(hf_smem + {off});  // {size} elements"));
                        }
                        MemoryType::Global => {}
                    }
                }
                Stmt::Compute(c) => self.compute(c, depth),
                Stmt::BlockReduce {
                    acc,
                    op,
                    dtype,
                    dims,
                } => {
                    self.uses.block_reduce = true;
                    let a = self.access(acc);
                    let f = match op {
                        ReduceOp::Sum => "hf_sum",
                        ReduceOp::Max => "hf_max",
                        ReduceOp::Min => "hf_min",
                    };
                    let off = self
                        .k
                        .reduce_scratch
                        .as_ref()
                        .map(|o| self.val(&Val::from_size(o)))
                        .unwrap_or_else(|| "0".into());
                    let ty = dtype.cuda();
                    self.line(
                        depth,
                        &format!(
                            "{a} = hf_block_reduce<{}, {}, {}{}>({a}, {f}(), reinterpret_cast<{ty}*>(hf_smem + {off}));",
                            dims[0], dims[1], dims[2],
                            self.consumer_threads.map(|n| format!(", {n}u")).unwrap_or_default()
                        ),
                    );
                }
                Stmt::Sync => match self.consumer_threads {
                    // Barrier 1 over the consumer threads (0 is __syncthreads).
                    Some(n) => {
                        self.uses.named_barrier = true;
                        self.line(depth, &format!("hf_bar_sync<{n}>();"))
                    }
                    None => self.line(depth, "__syncthreads();"),
                },
                Stmt::GroupSync { dims, threads } => {
                    self.uses.group_barrier = true;
                    let g = match dims.as_slice() {
                        [ParallelType::TIDz] => "threadIdx.z".to_string(),
                        [_, ParallelType::TIDz] | [ParallelType::TIDz, _] => {
                            "threadIdx.y + blockDim.y * threadIdx.z".to_string()
                        }
                        _ => "threadIdx.y".to_string(),
                    };
                    self.line(
                        depth,
                        &format!(
                            "hf_bar_sync_group<{threads}>({}u + {g});",
                            crate::target::GROUP_BARRIER_BASE
                        ),
                    );
                }
                Stmt::Turn {
                    step,
                    on,
                    groups,
                    threads,
                } => {
                    self.uses.group_barrier = true;
                    self.uses.turn_barrier = true;
                    let g = on.cuda_index().unwrap_or("threadIdx.y");
                    let top = crate::target::turn_barrier(0);
                    let line = match step {
                        crate::kir::TurnStep::Wait => {
                            format!("hf_bar_sync_group<{}>({top}u - {g});", 2 * threads)
                        }
                        crate::kir::TurnStep::Pass => format!(
                            "hf_bar_arrive_group<{}>({top}u - ({g} + 1u) % {groups}u);",
                            2 * threads
                        ),
                    };
                    self.line(depth, &line);
                }
                Stmt::ClusterSync => {
                    self.uses.cluster = true;
                    self.line(depth, "hf_cluster_sync();");
                }
                Stmt::Let {
                    var,
                    value,
                    broadcast,
                } => {
                    let v = strip_parens(self.val(value));
                    let v = if *broadcast {
                        from_lane0(&format!("({v})"))
                    } else {
                        v
                    };
                    self.line(depth, &format!("const index_t {var} = {v};"));
                }
                Stmt::MbarInit { bars } => {
                    self.uses.tma = true;
                    let m = &self.k.mbarriers[*bars];
                    let (name, n, arrivals) = (m.name.clone(), m.count, m.arrivals);
                    self.line(
                        depth,
                        &format!(
                            "for (int hf_s = 0; hf_s < {n}; ++hf_s) hf_mbarrier_init(&{name}[hf_s], {arrivals});"
                        ),
                    );
                    // One fence after the last array's init (the block barrier follows).
                    if *bars + 1 == self.k.mbarriers.len() {
                        self.line(depth, "hf_fence_mbarrier_init();");
                        // The same thread starts fetching every tensor map while the block
                        // barrier completes: the first TMA copy then finds its descriptor.
                        for m in &self.k.tensor_maps {
                            self.line(depth, &format!("hf_prefetch_tensormap(&{});", m.param));
                        }
                    }
                }
                Stmt::MbarInval { bars } => {
                    self.uses.tma = true;
                    let m = &self.k.mbarriers[*bars];
                    let (name, n) = (m.name.clone(), m.count);
                    self.line(
                        depth,
                        &format!("for (int hf_s = 0; hf_s < {n}; ++hf_s) hf_mbarrier_inval(&{name}[hf_s]);"),
                    );
                }
                Stmt::MbarArriveExpectTx { bars, slot, bytes } => {
                    let bar = self.barrier(*bars, slot);
                    self.line(
                        depth,
                        &format!("hf_mbarrier_arrive_expect_tx({bar}, {bytes}u);"),
                    );
                }
                Stmt::MbarWait { bars, slot, parity } => {
                    let bar = self.barrier(*bars, slot);
                    let parity = strip_parens(self.val(parity));
                    self.line(
                        depth,
                        &format!("hf_mbarrier_wait({bar}, (unsigned)({parity}));"),
                    );
                }
                Stmt::MbarExpectTx { bars, slot, bytes } => {
                    let bar = self.barrier(*bars, slot);
                    self.line(depth, &format!("hf_mbarrier_expect_tx({bar}, {bytes}u);"));
                }
                Stmt::MbarArrive {
                    bars,
                    slot,
                    per_warp,
                } => {
                    let bar = self.barrier(*bars, slot);
                    let ctas = self.k.cluster_ctas();
                    let line = match (*per_warp, self.k.mbarriers[*bars].cluster_wide) {
                        (true, false) => format!("hf_mbarrier_arrive_per_warp({bar});"),
                        (false, false) => format!("hf_mbarrier_arrive({bar});"),
                        (true, true) => {
                            format!("hf_mbarrier_arrive_cluster_per_warp({bar}, {ctas}u);")
                        }
                        (false, true) => format!("hf_mbarrier_arrive_cluster({bar}, {ctas}u);"),
                    };
                    self.uses.cluster |= self.k.mbarriers[*bars].cluster_wide;
                    self.line(depth, &line);
                }
                Stmt::TmaStore(t) => {
                    self.uses.tma = true;
                    self.uses.tma_store = true;
                    let param = self.k.tensor_maps[t.map].param.clone();
                    let src = self.access(&t.src);
                    let (rank, coords) = self.box_coords(&t.coords);
                    self.line(
                        depth,
                        &format!("hf_tma_store_{rank}d(&{param}, {coords}, &{src});"),
                    );
                }
                Stmt::BulkCommit => {
                    self.uses.tma_store = true;
                    self.line(depth, "hf_bulk_commit_group();");
                }
                Stmt::StreamKFixup { acc } => self.stream_k_fixup(*acc, depth),
                Stmt::BulkWaitRead(n) => {
                    self.uses.tma_store = true;
                    self.line(depth, &format!("hf_bulk_wait_group_read<{n}>();"));
                }
                Stmt::FenceProxyAsync => {
                    self.uses.tma_store = true;
                    self.line(depth, "hf_fence_proxy_async();");
                }
                Stmt::Wgmma(w) => {
                    self.uses.wgmma = true;
                    let input = match w.input {
                        DType::F16 => "f16",
                        _ => "bf16",
                    };
                    let shape = (w.n, input, w.a.transposed, w.b.transposed);
                    self.uses.wgmma_shapes.insert(shape);
                    let name = prelude::wgmma_name(w.n, input, w.a.transposed, w.b.transposed);
                    let acc = self.access(&w.acc);
                    let a = self.descriptor(&w.a.tile, w.a.desc_bits);
                    let b = self.descriptor(&w.b.tile, w.b.desc_bits);
                    let accumulate = match &w.accumulate {
                        Some(a) => self.access(a),
                        None => "1".into(),
                    };
                    self.line(depth, &format!("{name}(&{acc}, {a}, {b}, {accumulate});"));
                }
                Stmt::StMatrix { dst, src } => {
                    self.uses.stmatrix = true;
                    let dst = self.access(dst);
                    let src = self.access(src);
                    self.line(depth, &format!("hf_stmatrix_x4(&{dst}, &{src});"));
                }
                Stmt::WgmmaFence => {
                    self.uses.wgmma = true;
                    self.line(depth, "hf_wgmma_fence();");
                }
                Stmt::WgmmaCommit => {
                    self.uses.wgmma = true;
                    self.line(depth, "hf_wgmma_commit();");
                }
                Stmt::WgmmaWait(n) => {
                    self.uses.wgmma = true;
                    self.line(depth, &format!("hf_wgmma_wait<{n}>();"));
                }
                Stmt::TmaLoad(t) => {
                    let bar = self.barrier(t.bars, &t.slot);
                    let dst = self.access(&t.dst);
                    match t.kind {
                        crate::kir::CopyKind::Tile { map } => {
                            let param = self.k.tensor_maps[map].param.clone();
                            let (rank, coords) = self.box_coords(&t.coords);
                            match t.multicast {
                                Some(ctas) => {
                                    self.uses.cluster = true;
                                    self.uses.multicast_ranks.insert(rank);
                                    let mask = (1u32 << ctas) - 1;
                                    self.line(
                                        depth,
                                        &format!("hf_tma_load_{rank}d_multicast(&{dst}, &{param}, {coords}, {bar}, (unsigned short){mask:#x});"),
                                    );
                                }
                                None => self.line(
                                    depth,
                                    &format!(
                                        "hf_tma_load_{rank}d(&{dst}, &{param}, {coords}, {bar});"
                                    ),
                                ),
                            }
                        }
                        crate::kir::CopyKind::Bulk => {
                            let src = self.access(&t.src);
                            self.line(
                                depth,
                                &format!("hf_bulk_load(&{dst}, &{src}, {}u, {bar});", t.bytes),
                            );
                        }
                    }
                }
            }
        }
        self.current = holder;
    }
}

/// `operand` (one primary expression: `threadIdx.y`, or a value in parentheses) as every lane
/// of the (converged) warp has it in lane 0: ptxas then knows it is warp-uniform.
fn from_lane0(operand: &str) -> String {
    format!("__shfl_sync(0xffffffffu, (index_t){operand}, 0)")
}

/// Drops one pair of parentheses around a whole expression.
fn strip_parens(s: String) -> String {
    match strip_parens_str(&s) {
        inner if inner.len() < s.len() => inner.to_string(),
        _ => s,
    }
}

/// [`strip_parens`] of a borrowed text.
fn strip_parens_str(s: &str) -> &str {
    if s.starts_with('(') && s.ends_with(')') {
        let inner = &s[1..s.len() - 1];
        let mut depth = 0i32;
        for c in inner.bytes() {
            match c {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth < 0 {
                        return s;
                    }
                }
                _ => {}
            }
        }
        if depth == 0 {
            return inner;
        }
    }
    s
}
