"""A transformer block whose kernels are hopfuse's, on a Hopper GPU with real torch (issue 37).

A pre-norm, LLaMA-style block in bf16 as a `torch.nn.Module`:

    h   = RMSNorm(x)                      hopfuse: examples/auto/rmsnorm.hf, schedule="auto"
    qkv = h @ Wqkv^T                      hopfuse: examples/matmul/step15_persistent_raster.hf
    a   = SDPA(q, k, v, causal)           torch (until hopfuse's attention lands)
    x2  = x + a @ Wo^T                    hopfuse: step 15, then residual_add (schedule="auto")
    h2  = RMSNorm(x2)                     hopfuse
    m   = silu(h2 @ Wg^T) * (h2 @ Wu^T)   hopfuse: step 15 twice, swiglu (schedule="auto")
    out = x2 + m @ Wd^T                   hopfuse: step 15, residual_add

(the programs: transformer_block_programs.py). Every hopfuse kernel is a custom op registered
with `hopfuse.torch_op`, so one module runs eagerly, under `torch.compile(fullgraph=True)` (the
ops in the graph, traced through their fake implementations) and under CUDA graph capture.

Checks, each printed with its measured error (relative: max |a - b| / max |reference|):
  1. hopfuse block vs the eager PyTorch block (bf16, the same weights): <= 2e-2;
  2. hopfuse block vs the same block in float32: no worse than 2x the eager bf16 block's own
     error against float32, plus 1e-3 (hopfuse is as accurate as eager bf16);
  3. torch.compile'd and CUDA-graph-replayed hopfuse block vs the eager hopfuse block: <= 1e-3.
Timing (CUDA events, ms per forward, best of 3 rounds of --iters forwards, one process): eager
PyTorch, torch.compile of the PyTorch block, the hopfuse block eager, under torch.compile and
replayed from a CUDA graph. Exits 1 when a check fails.

    python3 python/examples/transformer_block.py --batch 8 --seq 1024 --hidden 2048 --heads 16

with the hopfuse wheel on the path (scripts/test-python.sh --release builds it).
"""

import argparse
import copy
import pathlib
import traceback
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import hopfuse  # noqa: E402
from transformer_block_programs import kernel_sizes, programs  # noqa: E402

EPS = 1e-6


def register_ops(hidden):
    """The block's hopfuse kernels as the custom ops `torch.ops.hopfuse_block.<program>`."""
    for name, (text, schedule) in programs(hidden).items():
        hopfuse.torch_op("hopfuse_block::%s" % name, text, schedule)
    return torch.ops.hopfuse_block


class Weights(torch.nn.Module):
    """The block's parameters (nn.Linear's layout: [out_features, in_features])."""

    def __init__(self, hidden, intermediate, dtype, generator):
        super().__init__()

        def linear(n, k):
            return torch.nn.Parameter(
                (torch.randn(n, k, generator=generator) / k**0.5).to("cuda", dtype), requires_grad=False
            )

        def norm(n):
            return torch.nn.Parameter(
                (1 + 0.1 * torch.randn(n, generator=generator)).to("cuda", dtype), requires_grad=False
            )

        self.norm1, self.norm2 = norm(hidden), norm(hidden)
        self.wqkv = linear(3 * hidden, hidden)
        self.wo = linear(hidden, hidden)
        self.wg = linear(intermediate, hidden)
        self.wu = linear(intermediate, hidden)
        self.wd = linear(hidden, intermediate)


def attention(qkv, batch, seq, heads):
    """Causal SDPA on the QKV projection's [tokens, 3 * hidden] output, back to [tokens, hidden]."""
    hidden = qkv.shape[1] // 3
    q, k, v = qkv.view(batch, seq, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4).unbind(0)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return a.transpose(1, 2).reshape(batch * seq, hidden)


class HopfuseBlock(torch.nn.Module):
    def __init__(self, weights, heads):
        super().__init__()
        self.w, self.heads = weights, heads

    def forward(self, x):
        batch, seq, hidden = x.shape
        ops, w = torch.ops.hopfuse_block, self.w  # registered by register_ops
        t = x.reshape(batch * seq, hidden)
        qkv = ops.matmul(ops.rmsnorm(t, w.norm1, eps=EPS), w.wqkv)
        x2 = ops.residual_add(t, ops.matmul(attention(qkv, batch, seq, self.heads), w.wo))
        h2 = ops.rmsnorm(x2, w.norm2, eps=EPS)
        m = ops.swiglu(ops.matmul(h2, w.wg), ops.matmul(h2, w.wu))
        return ops.residual_add(x2, ops.matmul(m, w.wd)).view(batch, seq, hidden)


def rmsnorm(t, weight):
    """The RMSNorm the hopfuse program computes: math in float32, rounded once."""
    tf = t.float()
    y = tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()
    return y.to(t.dtype)


class TorchBlock(torch.nn.Module):
    def __init__(self, weights, heads):
        super().__init__()
        self.w, self.heads = weights, heads

    def forward(self, x):
        batch, seq, hidden = x.shape
        w = self.w
        t = x.reshape(batch * seq, hidden)
        qkv = rmsnorm(t, w.norm1) @ w.wqkv.T
        x2 = t + attention(qkv, batch, seq, self.heads) @ w.wo.T
        h2 = rmsnorm(x2, w.norm2)
        m = F.silu(h2 @ w.wg.T) * (h2 @ w.wu.T)
        return (x2 + m @ w.wd.T).view(batch, seq, hidden)


def relative_error(a, reference):
    return ((a.float() - reference.float()).abs().max() / reference.float().abs().max()).item()


def time_ms(f, iters):
    """ms per call: CUDA events around `iters` calls, best of 3 rounds (after 3 warm-up calls)."""
    for _ in range(3):
        f()
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            f()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / iters)
    return best


def captured(block, x):
    """`block(x)` captured in a CUDA graph: (the graph, its static input, its static output).
    The kernels are compiled and loaded by warm-up calls on a side stream first (NVRTC and
    module loads cannot be captured)."""
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            block(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = block(static_x)
    return graph, static_x, static_out


def opchecks(ops, hidden):
    """torch.library.opcheck on each of the block's custom ops, on small tensors; True when
    every one passes (a failure is printed)."""
    print("\ntorch.library.opcheck")

    def bf16(*shape):
        return torch.randn(*shape, device="cuda").to(torch.bfloat16)

    cases = [
        (ops.rmsnorm.default, (bf16(64, hidden), bf16(hidden)), {"eps": EPS}),
        (ops.matmul.default, (bf16(128, 128), bf16(256, 128)), {}),
        (ops.residual_add.default, (bf16(64, 256), bf16(64, 256)), {}),
        (ops.swiglu.default, (bf16(64, 256), bf16(64, 256)), {}),
    ]
    ok = True
    for op, tensors, kwargs in cases:
        try:
            torch.library.opcheck(op, tensors, kwargs)
            print("  %-36s ok" % op)
        except Exception:  # noqa: BLE001 (every op is checked; the failure is printed)
            ok = False
            print("  %-36s FAILED\n%s" % (op, traceback.format_exc()))
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--intermediate", type=int, default=5632, help="the MLP's width (default 2.75 x 2048)")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if args.hidden % args.heads:
        parser.error("--hidden must be a multiple of --heads")

    tokens = args.batch * args.seq
    print(
        "block: batch %d x seq %d (%d tokens), hidden %d, %d heads, MLP %d, bf16; %s, torch %s"
        % (args.batch, args.seq, tokens, args.hidden, args.heads, args.intermediate, torch.cuda.get_device_name(), torch.__version__)
    )
    for name, sizes in kernel_sizes(tokens, args.hidden, args.intermediate):
        print("  hopfuse %-12s %s" % (name, ", ".join("%s=%d" % kv for kv in sizes.items())))

    generator = torch.Generator().manual_seed(0)
    weights = Weights(args.hidden, args.intermediate, torch.bfloat16, generator)
    x = torch.randn(args.batch, args.seq, args.hidden, generator=generator).to("cuda", torch.bfloat16)
    ops = register_ops(args.hidden)
    block = HopfuseBlock(weights, args.heads)
    eager = TorchBlock(weights, args.heads)
    exact = TorchBlock(copy.deepcopy(weights).float(), args.heads)

    with torch.no_grad():
        out = block(x)
        want = eager(x)
        truth = exact(x.float())
        compiled_block = torch.compile(block, fullgraph=True)
        compiled_out = compiled_block(x)
        graph, static_x, static_out = captured(block, x)
        graph.replay()
        torch.cuda.synchronize()

        eager_error = relative_error(want, truth)
        checks = [
            ("hopfuse vs eager PyTorch (bf16)", relative_error(out, want), 2e-2),
            ("hopfuse vs float32", relative_error(out, truth), 2 * eager_error + 1e-3),
            ("torch.compile(hopfuse block) vs eager hopfuse", relative_error(compiled_out, out), 1e-3),
            ("CUDA graph replay vs eager hopfuse", relative_error(static_out, out), 1e-3),
        ]
        print("\nerrors (max |a - b| / max |reference|); eager bf16 vs float32: %.3e" % eager_error)
        failed = False
        for name, error, tolerance in checks:
            ok = error <= tolerance
            failed |= not ok
            print("  %-48s %.3e (tolerance %.3e) %s" % (name, error, tolerance, "ok" if ok else "FAILED"))
        failed |= not opchecks(ops, args.hidden)

        compiled_eager = torch.compile(eager)
        timings = [
            ("eager PyTorch", lambda: eager(x)),
            ("torch.compile(PyTorch block)", lambda: compiled_eager(x)),
            ("hopfuse block (eager module)", lambda: block(x)),
            ("torch.compile(hopfuse block)", lambda: compiled_block(x)),
            ("hopfuse block, CUDA graph replay", graph.replay),
        ]
        flops = 2 * tokens * args.hidden * (4 * args.hidden + 3 * args.intermediate)
        flops += 4 * args.batch * args.seq * args.seq * args.hidden // 2  # causal attention
        print("\nms per forward (%d iterations, best of 3)" % args.iters)
        base = None
        for name, f in timings:
            ms = time_ms(f, args.iters)
            base = base or ms
            print("  %-36s %8.3f ms  %6.1f TFLOP/s  x%.2f vs eager" % (name, ms, flops / ms / 1e9, base / ms))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
