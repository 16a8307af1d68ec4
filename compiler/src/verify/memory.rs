//! Memory sizes and places (after `allocation`): register arrays of a constant size, shared
//! buffers, mbarrier arrays and the block-reduction scratch placed at aligned offsets inside
//! the kernel's dynamic shared memory, and that within the 227 KiB of a Hopper block.

use super::uniform::{block_threads, eval};
use super::{error_at, Rule, VerifyError};
use crate::fusion::MemoryType;
use crate::kir::{Kernel, Stmt, Val};
use crate::target::SMEM_PER_BLOCK as SMEM_LIMIT;

/// The largest register array the allocation pass gives a thread.
const MAX_REGISTER_ARRAY: i64 = 1024;

/// `first_alloc`: the first `alloc` statement of each buffer (buffers never allocated are not
/// the kernel's to size).
pub(super) fn check(
    k: &Kernel,
    first_alloc: &[Option<(usize, &Stmt)>],
    errors: &mut Vec<VerifyError>,
) {
    let dynamic = k.dynamic_smem.as_const();
    let constant = |v: &Option<Val>| v.as_ref().and_then(|v| eval(v, None));
    // A region [offset, offset + bytes) of dynamic shared memory: aligned and inside it.
    let place = |what: String, offset: Option<i64>, bytes: Option<i64>, align: i64| {
        let offset = offset?;
        if offset % align != 0 {
            return Some(format!(
                "{what} is at byte {offset}, not a multiple of {align}"
            ));
        }
        let end = offset.checked_add(bytes?)?;
        let total = dynamic?;
        (end > total).then(|| {
            format!("{what} ends at byte {end}, past the kernel's {total} bytes of dynamic shared memory")
        })
    };
    for (b, buf) in k.buffer_ids().zip(&k.buffers) {
        let Some(at) = first_alloc.get(b.index()).copied().flatten() else {
            continue;
        };
        let mut error = |rule, detail| errors.push(error_at(k, rule, Some(at), detail));
        let size = constant(&buf.size);
        match buf.memory {
            MemoryType::Local => {
                if !size.is_some_and(|n| (1..=MAX_REGISTER_ARRAY).contains(&n)) {
                    let text = buf.size.as_ref().map_or("no size".into(), |s| s.text());
                    error(
                        Rule::RegisterArraySize,
                        format!(
                            "register array `{}` has size {text}: a register array needs a constant size from 1 to {MAX_REGISTER_ARRAY}",
                            buf.name
                        ),
                    );
                }
            }
            MemoryType::Shared => {
                if buf.size.is_none() || buf.smem_offset.is_none() {
                    error(
                        Rule::SharedMemoryLayout,
                        format!("shared buffer `{}` has no size or no offset", buf.name),
                    );
                } else if let Some(problem) = place(
                    format!("shared buffer `{}`", buf.name),
                    constant(&buf.smem_offset),
                    size.and_then(|n| n.checked_mul(buf.dtype.size_bytes() as i64)),
                    16,
                ) {
                    error(Rule::SharedMemoryLayout, problem);
                }
            }
            MemoryType::Global => {}
        }
    }
    let mut kernel_error = |rule, detail| errors.push(error_at(k, rule, None, detail));
    for m in &k.mbarriers {
        let problem = match &m.smem_offset {
            None => Some(format!("mbarrier array `{}` has no offset", m.name)),
            offset => place(
                format!("mbarrier array `{}`", m.name),
                constant(offset),
                Some(m.count * 8),
                8,
            ),
        };
        if let Some(problem) = problem {
            kernel_error(Rule::SharedMemoryLayout, problem);
        }
    }
    if has_block_reduce(&k.body) {
        let problem = match &k.reduce_scratch {
            None => Some("a block reduction without reduction scratch".to_string()),
            Some(offset) => place(
                "the block-reduction scratch".into(),
                offset.as_const(),
                block_threads(k).map(|n| n * 8),
                8,
            ),
        };
        if let Some(problem) = problem {
            kernel_error(Rule::SharedMemoryLayout, problem);
        }
    }
    if let Some(total) = dynamic.filter(|&n| n > SMEM_LIMIT) {
        kernel_error(
            Rule::SharedMemoryLimit,
            format!("the kernel uses {total} bytes of dynamic shared memory; a Hopper block has at most {SMEM_LIMIT} (227 KiB)"),
        );
    }
}

/// Whether a statement list holds a block or grid reduction (it then needs the reduction
/// scratch).
fn has_block_reduce(body: &[Stmt]) -> bool {
    crate::kir::any_stmt(body, &mut |s| {
        matches!(s, Stmt::BlockReduce { .. } | Stmt::GridReduce(_))
    })
}
