//! Stream-K's hand-over in the generated CUDA: the workspace parameter (a slot of partial sums
//! per CTA, then a flag per CTA) and the code of [`Stmt::StreamKFixup`]. The split itself is
//! the `persistent` pass's ([`crate::kir::StreamK`]).

use super::{strip_parens, Emitter};
use crate::dtype::DType;
use crate::kir::{BufferId, Kernel, Stmt, Val};
use crate::plan::{Param, SizeExpr, TensorRole};

/// The kernel parameter of a stream-K workspace.
const STREAM_K_WORKSPACE: &str = "hf_workspace";

/// The shape of one CTA's slot in a stream-K workspace: the fixup's accumulator registers per
/// thread, and the consumer threads that hold them.
fn stream_k_slot(k: &Kernel) -> Option<(i64, i64)> {
    crate::kir::stream_k(k)?;
    let mut regs = None;
    let mut threads = None;
    crate::kir::for_each_stmt(&k.body, &mut |s| match s {
        Stmt::StreamKFixup { acc: Some(b) } => {
            if let Some(Val::Int(n)) = k.buffers[*b].size {
                regs = Some(n);
            }
        }
        Stmt::WarpRoles(w) => threads = Some(w.consumer_threads),
        _ => {}
    });
    let threads = threads.or_else(|| k.block.iter().map(|b| b.as_const()).product())?;
    Some((regs?, threads))
}

/// The workspace parameter of a stream-K kernel and its declaration: per CTA, a slot of the
/// partial sums of its accumulator, then one flag per CTA.
pub(super) fn workspace_param(k: &Kernel) -> Option<(Param, String)> {
    let (regs, threads) = stream_k_slot(k)?;
    let slot = regs * threads;
    let floats = crate::target::STREAM_K_MAX_CTAS * (slot + 1);
    let param = Param::Tensor {
        name: STREAM_K_WORKSPACE.into(),
        dtype: DType::F32,
        role: TensorRole::Workspace,
        shape: vec![SizeExpr::Const(floats)],
    };
    Some((param, format!("float* __restrict__ {STREAM_K_WORKSPACE}")))
}

impl Emitter<'_> {
    /// Stream-K after a piece of a tile ([`Stmt::StreamKFixup`]). A piece that does not end
    /// its tile leaves its partial sums in the CTA's workspace slot (coalesced: register group
    /// `i` of every thread is one run of float4s), meets the other consumers, and one thread
    /// raises the CTA's flag with release semantics. The piece that ends a tile begun by
    /// earlier CTAs takes each of their slots in turn: one thread waits for the flag with
    /// acquire semantics and lowers it again, the consumers meet, and every thread adds the
    /// slot to its registers (loads that bypass L1, which another SM's writes do not reach).
    pub(super) fn stream_k_fixup(&mut self, acc: Option<BufferId>, depth: usize) {
        let (Some(sk), Some(acc), Some((regs, threads))) =
            (crate::kir::stream_k(self.k), acc, stream_k_slot(self.k))
        else {
            self.line(
                depth,
                "#error \"internal: a stream-K fixup without its accumulator\"",
            );
            return;
        };
        self.uses.stream_k = true;
        let slot = regs * threads;
        let name = self.k.buffers[acc].name.clone();
        let barrier = match self.consumer_threads {
            Some(n) => {
                self.uses.named_barrier = true;
                format!("hf_bar_sync<{n}>();")
            }
            None => "__syncthreads();".to_string(),
        };
        let (lo, hi, kt, tile_start) = (
            self.val(&sk.lo),
            self.val(&sk.hi),
            self.val(&sk.kt),
            self.val(&sk.tile_start),
        );
        // Where CTA p's run ends: start(p + 1).
        let peer_end = sk.run_start(Val::add(Val::Var("hf_sk_p".into()), Val::Int(1)));
        let peer_end = self.val(&peer_end);
        let ws = STREAM_K_WORKSPACE;
        let max = crate::target::STREAM_K_MAX_CTAS;
        let lines = [
            "{  // stream-K".to_string(),
            format!("  const index_t hf_sk_lo = {};", strip_parens(lo)),
            format!("  const index_t hf_sk_hi = {};", strip_parens(hi)),
            "  const unsigned hf_sk_tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);".into(),
            format!("  unsigned* hf_sk_flags = reinterpret_cast<unsigned*>({ws} + {max}ll * {slot});"),
            format!(
                "  if (hf_sk_hi < {}) {{  // hand on",
                strip_parens(kt)
            ),
            format!("    hf_sk_store<{regs}, {threads}>({ws}, blockIdx.x, &{name}[0], hf_sk_tid);"),
            format!("    {barrier}"),
            "    if (hf_sk_tid == 0) hf_sk_raise(&hf_sk_flags[blockIdx.x]);".into(),
            "  } else if (0 < hf_sk_lo) {  // add the others".into(),
            format!(
                "    for (index_t hf_sk_p = (index_t)blockIdx.x - 1; 0 <= hf_sk_p && {} < {}; --hf_sk_p) {{",
                tile_start, peer_end
            ),
            "      if (hf_sk_tid == 0) hf_sk_wait(&hf_sk_flags[hf_sk_p]);".into(),
            format!("      {barrier}"),
            format!("      hf_sk_add<{regs}, {threads}>({ws}, hf_sk_p, &{name}[0], hf_sk_tid);"),
            "    }".into(),
            "  }".into(),
            "}".into(),
        ];
        for l in &lines {
            self.line(depth, l);
        }
    }
}
