//! Pass `reduction`: lowers each reduction into accumulate / combine / write.
//!
//! Requires: `loop_nest` (one `ReductionUpdate` compute per reduction, inside the reduction's
//! own loops). Guarantees: the update accumulates into a register accumulator `{t}_acc` that is
//! initialised to the identity right before the first reduction loop; when reduction axes are
//! bound to thread dims, a `BlockReduce` after the loops (outside every predicate, so every
//! thread of the block reaches it) leaves the result in every thread; a `ReductionWrite` then
//! stores it to the tensor. Reduction axes bound to block dims were rejected by the schedule.

use super::Ctx;
use crate::diag::Diagnostic;
use crate::fusion::{IterKind, MemoryType, Op, ParallelType};
use crate::kir::{Access, Buffer, Compute, ComputeRole, Data, Kernel, Loop, Stmt, Val};

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<(), Diagnostic> {
    let f = cx.fusion;
    for (e, expr) in f.exprs.iter().enumerate() {
        let Op::Reduce { op, .. } = expr.op else {
            continue;
        };
        let t = expr.output;
        let tensor = &f.tensors[t];
        let Some(first) = tensor
            .loop_domain
            .iter()
            .position(|&id| f.ids[id].kind == IterKind::Reduction)
        else {
            continue;
        };
        let first_key = cx.id_keys[&tensor.loop_domain[first]];
        let after = &tensor.loop_domain[first..];
        let serial_iter: Vec<usize> = after
            .iter()
            .copied()
            .filter(|&id| f.ids[id].kind != IterKind::Reduction && !f.ids[id].parallel.is_hw())
            .collect();
        let mut dims = [false; 3];
        for &id in after {
            if f.ids[id].kind == IterKind::Reduction && f.ids[id].parallel.is_thread() {
                if let Some(d) = f.ids[id].parallel.dim() {
                    dims[d] = true;
                }
            }
        }
        let dtype = tensor.dtype.compute();
        let acc = k.buffers.len();
        let acc_name = cx.fresh_name(&format!("{}_acc", tensor.name));
        k.buffers.push(Buffer {
            name: acc_name,
            dtype,
            memory: MemoryType::Local,
            tensor: None,
            size: None,
            smem_offset: None,
            global_shape: Vec::new(),
            is_input: false,
        });
        cx.alloc_ids.insert(acc, serial_iter.clone());
        cx.accumulator_of.insert(acc, t);
        let out_buf = cx.tensor_buffer[&t];
        let loops_over = |cx: &Ctx, inner: Vec<Stmt>| -> Vec<Stmt> {
            let mut body = inner;
            for &id in serial_iter.iter().rev() {
                let key = cx.id_keys[&id];
                body = vec![Stmt::Loop(Loop {
                    key,
                    var: cx.keys.names[key].clone(),
                    extent: Val::from_size(&cx.key_extent(key)),
                    parallel: if f.ids[id].parallel == ParallelType::Vectorize {
                        ParallelType::Unroll
                    } else {
                        f.ids[id].parallel
                    },
                    body,
                })];
            }
            body
        };
        let acc_access = Access {
            buffer: acc,
            index: None,
        };
        let mut replacement = vec![Stmt::Alloc(acc)];
        replacement.extend(loops_over(
            cx,
            vec![Stmt::Compute(Compute {
                expr: e,
                out: acc_access.clone(),
                value: Data::Literal(op.identity(), dtype),
                role: ComputeRole::ReductionInit,
                vector: None,
            })],
        ));
        let mut tail = Vec::new();
        if dims.iter().any(|&d| d) {
            tail.extend(loops_over(
                cx,
                vec![Stmt::BlockReduce {
                    acc: acc_access.clone(),
                    op,
                    dtype,
                    dims,
                }],
            ));
        }
        tail.extend(loops_over(
            cx,
            vec![Stmt::Compute(Compute {
                expr: e,
                out: Access {
                    buffer: out_buf,
                    index: None,
                },
                value: Data::Read(acc_access.clone()),
                role: ComputeRole::ReductionWrite,
                vector: None,
            })],
        ));
        if !rewrite(
            &mut k.body,
            e,
            first_key,
            acc,
            out_buf,
            &mut Some((replacement, tail)),
        ) {
            return Err(Diagnostic::new(
                format!(
                    "internal: the reduction loop of `{}` was not found",
                    tensor.name
                ),
                tensor.span,
            ));
        }
    }
    Ok(())
}

/// Finds the loop with `first_key` that holds the update of expression `e`, redirects the
/// update to the accumulator and surrounds the loop with the init and tail statements.
fn rewrite(
    body: &mut Vec<Stmt>,
    e: usize,
    first_key: usize,
    acc: usize,
    out_buf: usize,
    parts: &mut Option<(Vec<Stmt>, Vec<Stmt>)>,
) -> bool {
    for i in 0..body.len() {
        let hit = match &mut body[i] {
            Stmt::Loop(l) => {
                if l.key == first_key && redirect(&mut l.body, e, acc, out_buf) {
                    true
                } else if rewrite(&mut l.body, e, first_key, acc, out_buf, parts) {
                    return true;
                } else {
                    false
                }
            }
            _ => false,
        };
        if hit {
            let Some((before, after)) = parts.take() else {
                return false;
            };
            let n_before = before.len();
            for (j, s) in after.into_iter().enumerate() {
                body.insert(i + 1 + j, s);
            }
            for (j, s) in before.into_iter().enumerate() {
                body.insert(i + j, s);
            }
            let _ = n_before;
            return true;
        }
    }
    false
}

fn redirect(body: &mut [Stmt], e: usize, acc: usize, out_buf: usize) -> bool {
    for s in body.iter_mut() {
        match s {
            Stmt::Compute(c) if c.expr == e && c.role == ComputeRole::ReductionUpdate => {
                c.out = Access {
                    buffer: acc,
                    index: None,
                };
                if let Data::Binary(_, _, lhs, _) = &mut c.value {
                    if matches!(**lhs, Data::Read(Access { buffer, .. }) if buffer == out_buf) {
                        **lhs = Data::Read(Access {
                            buffer: acc,
                            index: None,
                        });
                    }
                }
                return true;
            }
            Stmt::Loop(l) => {
                let found = redirect(&mut l.body, e, acc, out_buf);
                if found {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}
