//! Pass `predicate`: guards computations that may fall outside the tensor or repeat work.
//!
//! Requires: `indexing`. Bounds: every root axis of the computed tensor reached through a split
//! that may not divide evenly gets `index < extent`. Thread predicates: a write to global or
//! shared memory by a tensor that does not vary along a thread or block dimension the kernel
//! uses happens only where that index is 0 (one writer, no racing identical stores); for shared
//! memory only thread indices count (each block writes its own copy).
//! Vectorization: a copy between global memory and registers or shared memory that is alone in
//! its `Vectorize` loop, with lanes contiguous in memory, becomes one vector access; with a
//! bounds predicate it is taken when the whole vector is in bounds, else the lanes run one by
//! one (the tail).
//! Predicates wrap single computations, never barriers or block reductions, so every thread
//! reaches every barrier. Vectors whose alignment depends on the sizes also check it at run time
//! and take the scalar path when misaligned, unless the compile is specialised for it
//! (`PassOptions::vectors_aligned`: `CompileOptions::assume_aligned_vectors` for every vector, or
//! `CompileOptions::aligned_for` for those the run's sizes keep aligned, as the runner asks):
//! then the check becomes a divisibility constraint of the launch plan.
//! Emits: `if` statements and vector computes.

use super::context::{Ctx, LoopKey, LoopScope};
use super::indexing::consumer_roots;
use super::probe::eval;
use crate::diag::Diagnostic;
use crate::fusion::{IterKind, MemoryType, Op, ParallelType};
use crate::kir::{
    visit_mut, Compute, ComputeRole, Data, Flow, Kernel, Loop, Stmt, Val, VisitorMut,
};
use crate::plan::{Constraint, SizeExpr};
use rustc_hash::FxHashMap as HashMap;

/// Runs the pass; returns the launch constraints of the vectors compiled as aligned.
pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Vec<Constraint>, Diagnostic> {
    let env: HashMap<LoopKey, Val> = cx.hw_env(k);
    let used: Vec<ParallelType> = ParallelType::ALL
        .into_iter()
        .filter(|p| p.is_hw())
        .filter(|p| {
            let d = p.dim().unwrap_or(0);
            let e = if p.is_block() {
                &k.grid[d]
            } else {
                &k.block[d]
            };
            *e != SizeExpr::Const(1)
        })
        .collect();
    let mut body = std::mem::take(&mut k.body);
    let mut state = State {
        k,
        used,
        constraints: Vec::new(),
    };
    let mut walk = Guard {
        state: &mut state,
        cx,
        env,
        scope: LoopScope::default(),
    };
    visit_mut(&mut body, &mut walk)?;
    let constraints = state.constraints;
    k.body = body;
    Ok(constraints)
}

struct State<'a> {
    k: &'a Kernel,
    used: Vec<ParallelType>,
    /// The launch constraints of the vectors compiled as aligned, each once.
    constraints: Vec<Constraint>,
}

/// The walk of [`run`]: guards the statements in place, each becoming exactly one statement
/// (a guarded computation, a vector access, a loop), so no block is rebuilt; `env` binds the
/// keys of the loops around the statement.
struct Guard<'s, 'k, 'c> {
    state: &'s mut State<'k>,
    cx: &'s mut Ctx<'c>,
    env: HashMap<LoopKey, Val>,
    scope: LoopScope,
}

impl VisitorMut for Guard<'_, '_, '_> {
    type Error = Diagnostic;

    fn stmt(&mut self, slot: &mut Stmt, _at: usize) -> Result<Flow, Diagnostic> {
        match slot {
            // A copy alone in its vectorized loop must become one vector access (else an
            // error). A broadcast operand read from global memory there (a norm's weight row)
            // becomes one where its lanes are consecutive and aligned, else the lanes run one
            // by one as before: the user vectorized the consumer, not the read.
            Stmt::Loop(l) if l.parallel == ParallelType::Vectorize && l.body.len() == 1 => {
                let Stmt::Compute(c) = &l.body[0] else {
                    l.parallel = ParallelType::Unroll;
                    return Ok(Flow::Descend);
                };
                let required = self.state.vectorizable(self.cx, c);
                if !required && !self.state.broadcast_read(self.cx, c, &l.var) {
                    l.parallel = ParallelType::Unroll;
                    return Ok(Flow::Descend);
                }
                let (lc, cc) = (l.clone(), c.clone());
                // The vector's lanes are the loop's: its key is bound while it is built.
                self.scope.bind(&mut self.env, &lc);
                let vector = self.state.vector(self.cx, lc, cc, &self.env);
                self.scope.unbind(&mut self.env);
                match vector {
                    Ok(v) => {
                        *slot = v;
                        Ok(Flow::Skip)
                    }
                    Err(e) if required => Err(e),
                    Err(_) => {
                        l.parallel = ParallelType::Unroll;
                        Ok(Flow::Descend)
                    }
                }
            }
            Stmt::Loop(l) => {
                if l.parallel == ParallelType::Vectorize {
                    l.parallel = ParallelType::Unroll;
                }
                Ok(Flow::Descend)
            }
            Stmt::Compute(_) => {
                let Stmt::Compute(c) = std::mem::replace(slot, Stmt::Sync) else {
                    unreachable!("matched above")
                };
                let pred = self.state.predicate(self.cx, &c, &self.env);
                *slot = guard(pred, vec![Stmt::Compute(c)]);
                Ok(Flow::Skip)
            }
            // Only loops' bodies are guarded; conditionals and warp roles stay as they are.
            _ => Ok(Flow::Skip),
        }
    }

    fn enter(&mut self, st: &Stmt, _body: usize) -> Result<Flow, Diagnostic> {
        self.scope.enter(&mut self.env, st);
        Ok(Flow::Descend)
    }

    fn leave(&mut self, st: &mut Stmt, _body: usize) -> Result<(), Diagnostic> {
        self.scope.leave(&mut self.env, st);
        Ok(())
    }
}

impl State<'_> {
    /// Bounds and thread predicate of one computation.
    fn predicate(&self, cx: &mut Ctx, c: &Compute, env: &HashMap<LoopKey, Val>) -> Val {
        let f = cx.fusion;
        let t = f.exprs[c.expr].output;
        let tensor = &f.tensors[t];
        let roots = consumer_roots(cx, t, env);
        let mut conds = Vec::new();
        if c.role != ComputeRole::ReductionInit {
            for &r in &tensor.root {
                let ax = &f.ids[r];
                if ax.kind == IterKind::Broadcast {
                    continue;
                }
                let outside_reduction = matches!(
                    c.role,
                    ComputeRole::ReductionWrite | ComputeRole::OnlineRescale
                );
                if outside_reduction && ax.kind == IterKind::Reduction {
                    continue;
                }
                let class = f.class_of(r);
                let ragged = tensor
                    .loop_domain
                    .iter()
                    .map(|&id| cx.keys.of_axis[&id])
                    .any(|key| cx.key_classes(key).contains(&class) && !cx.divisible(key));
                if !ragged {
                    continue;
                }
                if let Some(v) = roots.get(&class) {
                    conds.push(Val::lt(v.clone(), Val::from_size(&cx.class_extent(class))));
                }
            }
        }
        let out_mem = self.k.buffers[c.out.buffer].memory;
        if out_mem != MemoryType::Local {
            // Shared memory is the block's own: every block fills its copy, so only the thread
            // indices pick one writer.
            let per_block = out_mem == MemoryType::Shared;
            for &p in self.used.iter().filter(|p| !(per_block && p.is_block())) {
                // Mma axes spread the tile over the warp group's threads (threadIdx.x).
                let varies = tensor.loop_domain.iter().any(|&id| {
                    let q = f.ids[id].parallel;
                    (q == p || (q == ParallelType::Mma && p == ParallelType::TIDx))
                        && f.ids[id].kind != IterKind::Reduction
                });
                if !varies {
                    conds.push(Val::eq(Val::Hw(p), Val::Int(0)));
                }
            }
        }
        Val::all(conds)
    }

    /// A copy between global memory and registers (either way) of one vector (a gather's
    /// read of a fusion input is one: its rows are contiguous past the index read from data).
    fn vectorizable(&self, cx: &Ctx, c: &Compute) -> bool {
        let f = cx.fusion;
        let copy = matches!(f.exprs[c.expr].op, Op::Set | Op::Gather { .. });
        if c.role != ComputeRole::Normal || !copy {
            return false;
        }
        let Data::Read(src) = &c.value else {
            return false;
        };
        let (a, b) = (
            self.k.buffers[src.buffer].memory,
            self.k.buffers[c.out.buffer].memory,
        );
        matches!(
            (a, b),
            (MemoryType::Global, MemoryType::Local | MemoryType::Shared)
                | (MemoryType::Local | MemoryType::Shared, MemoryType::Global)
        )
    }

    /// A broadcast of a fusion input read straight from global memory into registers, at
    /// `base + lane` (written so: the probes of [`lanes_consecutive`] cannot rule out a wrap
    /// such as `(base + lane) % N` inside a vector, so nothing else is taken here).
    fn broadcast_read(&self, cx: &Ctx, c: &Compute, lane: &str) -> bool {
        let Data::Read(src) = &c.value else {
            return false;
        };
        let base_plus_lane = match &src.index {
            Some(Val::Add(a, b)) => match (&**a, &**b) {
                (Val::Var(v), e) | (e, Val::Var(v)) => v == lane && !e.mentions(lane),
                _ => false,
            },
            _ => false,
        };
        base_plus_lane
            && c.role == ComputeRole::Normal
            && matches!(cx.fusion.exprs[c.expr].op, Op::Broadcast { .. })
            && self.k.buffers[src.buffer].memory == MemoryType::Global
            && self.k.buffers[c.out.buffer].memory == MemoryType::Local
    }

    fn vector(
        &mut self,
        cx: &mut Ctx,
        l: Loop,
        c: Compute,
        env: &HashMap<LoopKey, Val>,
    ) -> Result<Stmt, Diagnostic> {
        let f = cx.fusion;
        let width = match l.extent {
            Val::Int(w) => w,
            _ => {
                return Err(Diagnostic::new(
                    "internal: vector loop without constant extent",
                    None,
                ))
            }
        };
        let Data::Read(src) = &c.value else {
            unreachable!()
        };
        let global = if self.k.buffers[src.buffer].memory == MemoryType::Global {
            src
        } else {
            &c.out
        };
        let gname = self.k.buffers[global.buffer].name.clone();
        // A specialised kernel's strides are still size symbols here (pass `specialize` comes
        // later) while its loop extents are numbers already: probe them with the sizes' values.
        let sized = |v: Val| match &cx.options.specialized {
            Some(sizes) => v.subst_sizes(sizes),
            None => v,
        };
        let gidx = sized(global.index.clone().unwrap_or(Val::Int(0)));
        let lidx = if global.buffer == src.buffer {
            c.out.index.clone()
        } else {
            src.index.clone()
        }
        .map_or(Val::Int(0), sized);
        let dtype_bytes = self.k.buffers[global.buffer].dtype.size_bytes() as i64;
        // Lanes must be consecutive in memory on both sides.
        // Probe the simplified forms: smaller trees, same values.
        let no_facts = std::collections::HashMap::new();
        let (gprobe, lprobe) = (
            super::simplify::simplify(&gidx, &no_facts),
            super::simplify::simplify(&lidx, &no_facts),
        );
        let lanes_ok = |idx: &Val| lanes_consecutive(idx, &l.var, width);
        if !lanes_ok(&gprobe) || !lanes_ok(&lprobe) {
            return Err(Diagnostic::new(
                format!(
                    "cannot vectorize the access to `{gname}`: the vectorized axis `{}` is not contiguous in memory (vectorize the innermost axis of the tensor)",
                    l.var
                ),
                f.tensors[f.exprs[c.expr].output].span,
            ));
        }
        // The first lane must be aligned to the vector: find which sizes must be multiples.
        let symbols = f.symbols.clone();
        // A shared buffer's side has no run-time fallback: its first lanes are aligned always.
        let other = if global.buffer == src.buffer {
            &c.out
        } else {
            src
        };
        if self.k.buffers[other.buffer].memory == MemoryType::Shared
            && !aligned(&lprobe, &l.var, width, &symbols, &[])
        {
            return Err(Diagnostic::new(
                format!(
                    "cannot vectorize the access to `{}`: its vectors in shared memory are not aligned to {} bytes (a row_pad= that is not a multiple of the vector?)",
                    self.k.buffers[other.buffer].name,
                    width * dtype_bytes
                ),
                f.tensors[f.exprs[c.expr].output].span,
            ));
        }
        // When alignment depends on the sizes (rows of a length that is not a multiple of the
        // vector), the vector path also checks it at run time and falls back to scalars.
        let zero = Val::Int(0);
        let mut align_check = Val::True;
        if !aligned(&gprobe, &l.var, width, &symbols, &[]) {
            // Specialised, the sizes are fixed: a vector they misalign takes the run-time check
            // (the generic kernel of the same program says whether it is never aligned).
            if cx.options.specialized.is_none()
                && !aligned(&gprobe, &l.var, width, &symbols, &symbols)
            {
                return Err(Diagnostic::new(
                    format!(
                        "cannot vectorize the access to `{gname}`: its vectors are never aligned to {} bytes",
                        width * dtype_bytes
                    ),
                    f.tensors[f.exprs[c.expr].output].span,
                ));
            }
            let divisible: Vec<(SizeExpr, i64)> = self.k.buffers[global.buffer]
                .global_shape
                .iter()
                .skip(1)
                .filter(|(e, _)| matches!(e, SizeExpr::Sym(_)))
                .map(|(e, _)| (e.clone(), width))
                .collect();
            if cx.options.vectors_aligned(&divisible) {
                for (value, _) in divisible {
                    let c = Constraint::Divisible {
                        value,
                        divisor: width,
                        reason: format!(
                            "compiled for aligned {}-byte vectors of `{gname}`",
                            width * dtype_bytes
                        ),
                    };
                    if !self.constraints.contains(&c) {
                        self.constraints.push(c);
                    }
                }
            } else {
                align_check = Val::eq(
                    Val::rem(gidx.subst(&l.var, &zero), Val::Int(width)),
                    Val::Int(0),
                );
            }
        }
        let pred = self.predicate(cx, &c, env);
        let mut vc = c.clone();
        vc.out.index = vc.out.index.map(|i| i.subst(&l.var, &zero));
        if let Data::Read(a) = &mut vc.value {
            a.index = a.index.take().map(|i| i.subst(&l.var, &zero));
        }
        vc.vector = Some((l.var.clone(), width as u32));
        if pred == Val::True && align_check == Val::True {
            return Ok(Stmt::Compute(vc));
        }
        if !pred.mentions(&l.var) && align_check == Val::True {
            return Ok(guard(pred, vec![Stmt::Compute(vc)]));
        }
        let last = Val::and(pred.subst(&l.var, &Val::Int(width - 1)), align_check);
        let tail = Stmt::Loop(Loop {
            key: l.key,
            var: l.var.clone(),
            extent: l.extent.clone(),
            parallel: ParallelType::Unroll,
            digits: Vec::new(),
            body: vec![guard(pred, vec![Stmt::Compute(c)])],
        });
        Ok(Stmt::If {
            cond: last,
            then: vec![Stmt::Compute(vc)],
            els: vec![tail],
        })
    }
}

fn guard(pred: Val, body: Vec<Stmt>) -> Stmt {
    if pred == Val::True {
        body.into_iter().next().unwrap_or(Stmt::Sync)
    } else {
        Stmt::If {
            cond: pred,
            then: body,
            els: Vec::new(),
        }
    }
}

/// Whether lanes `0..width` of `var` address consecutive elements, on several probes.
fn lanes_consecutive(idx: &Val, var: &str, width: i64) -> bool {
    (0..8u64).all(|seed| match eval(idx, var, 0, seed, &[], 1) {
        Some(base) => {
            (1..width).all(|lane| eval(idx, var, lane, seed, &[], 1) == Some(base + lane))
        }
        None => false,
    })
}

fn aligned(idx: &Val, var: &str, width: i64, _symbols: &[String], multiples: &[String]) -> bool {
    (0..6u64).all(|seed| eval(idx, var, 0, seed, multiples, width).is_some_and(|v| v % width == 0))
}
