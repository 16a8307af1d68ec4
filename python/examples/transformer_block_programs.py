"""The hopfuse programs of python/examples/transformer_block.py, without torch: the program
text and schedule of each kernel of a pre-norm transformer block (LLaMA-style: RMSNorm, QKV
projection, attention, output projection + residual, RMSNorm, SwiGLU MLP + residual) in bf16,
and the sizes each kernel is called with for a block's shape. python/tests/test_hopfuse.py
compiles every one for the block's shapes (CI, no GPU); transformer_block.py runs them.

Products are examples/matmul/step15_persistent_raster.hf (C = A B^T, bf16 in, f32 accumulate,
bf16 out: torch's `x @ w.T` for an nn.Linear weight w); the RMSNorm is examples/auto/rmsnorm.hf
at the block's hidden size; the residual add and SwiGLU are written here. Those three have no
schedule block: they take hopfuse's automatic schedule (`schedule="auto"`).
"""

import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

RESIDUAL_ADD = """// The residual stream: out = x + y in bf16, the sum in f32 (as torch's bf16 add rounds once).
fusion residual_add {
  input x: bf16[M, N]
  input y: bf16[M, N]
  out = cast(cast(x, f32) + cast(y, f32), bf16)
  output out
}
"""

SWIGLU = """// SwiGLU's gate: silu(gate) * up in bf16, math in f32 (torch's F.silu(gate) * up rounds
// silu's result to bf16 before the product; the f32 product here rounds once).
fusion swiglu {
  input gate: bf16[M, N]
  input up: bf16[M, N]
  out = cast(silu(cast(gate, f32)) * cast(up, f32), bf16)
  output out
}
"""


def rmsnorm(hidden):
    """examples/auto/rmsnorm.hf with rows of `hidden` values instead of 4096."""
    text = (EXAMPLES / "auto" / "rmsnorm.hf").read_text()
    if text.count("4096") != 4:
        raise ValueError("examples/auto/rmsnorm.hf changed: expected its width 4096 four times")
    return text.replace("4096", str(hidden))


def matmul():
    return (EXAMPLES / "matmul" / "step15_persistent_raster.hf").read_text()


def programs(hidden):
    """name -> (program text, schedule argument of hopfuse.compile)."""
    return {
        "rmsnorm": (rmsnorm(hidden), "auto"),
        "matmul": (matmul(), None),
        "residual_add": (RESIDUAL_ADD, "auto"),
        "swiglu": (SWIGLU, "auto"),
    }


def kernel_sizes(tokens, hidden, intermediate):
    """(program name, the size symbols of one call) for every kernel call of a block's forward
    on `tokens` rows (batch x sequence), in call order."""
    return [
        ("rmsnorm", {"M": tokens}),
        ("matmul", {"M": tokens, "N": 3 * hidden, "K": hidden}),  # QKV projection
        ("matmul", {"M": tokens, "N": hidden, "K": hidden}),  # output projection
        ("residual_add", {"M": tokens, "N": hidden}),
        ("rmsnorm", {"M": tokens}),
        ("matmul", {"M": tokens, "N": intermediate, "K": hidden}),  # gate
        ("matmul", {"M": tokens, "N": intermediate, "K": hidden}),  # up
        ("swiglu", {"M": tokens, "N": intermediate}),
        ("matmul", {"M": tokens, "N": hidden, "K": intermediate}),  # down
        ("residual_add", {"M": tokens, "N": hidden}),
    ]
