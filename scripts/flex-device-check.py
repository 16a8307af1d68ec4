"""The FlexAttention peers' twins with the real torch: each twin `emit_flex` writes for the tests
(compiler/src/backend/torch/flex/snapshots/*.snap: plain, causal, sliding window, softcap,
ALiBi, document mask) called on random inputs and compared with the same attention computed
here in float64 by plain torch ops (relative L2 below 1e-2, all finite), on the GPU when torch
sees one (each call also timed, 20 calls after one) and else on the CPU, at B=16,S=T=2048 and
the ragged B=3,S=1000,T=1037 unless sizes are given. No Rust or hopfuse binary needed.

  python3 scripts/flex-device-check.py [B,S,T ...]

Exit status 1 when a twin does not match.
"""
import importlib.util
import os
import sys
import tempfile

import torch

dev = "cuda" if torch.cuda.is_available() else "cpu"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
snaps = os.path.join(root, "compiler/src/backend/torch/flex/snapshots/hopfuse__backend__torch__flex__tests__%s.snap")


def load(case):
    """The twin's function, from its snapshot (the text after insta's header)."""
    src = open(snaps % case).read().split("---\n", 2)[2]
    path = os.path.join(tempfile.mkdtemp(), case + ".py")
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(case, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return next(getattr(m, n) for n in dir(m) if n.endswith("_flex"))


def case_inputs(case, B, S, T, g):
    """The twin's arguments (on the device) and the float64 attention they should give: the
    fusions of compiler/src/backend/torch/flex/tests.rs (examples/auto/attention.hf and its
    variants, examples/attention/online_wgmma_sliding_window.hf, examples/attention/softcap.hf)."""
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1
    batched = case not in ("sliding_window", "softcap_unbatched_f32")
    D = 64 if not batched else 128
    dt = torch.float32 if case == "softcap_unbatched_f32" else torch.bfloat16
    lead = (B,) if batched else ()
    q, k, v = (r(*lead, n, D).to(dt) for n in (S, T, T))
    scale = 0.125 if not batched else 0.08838834764831845
    scale = torch.tensor(scale).float().item()  # the f32 value, as the fusion's
    sc = torch.tensor(scale)
    i = torch.arange(S).view(-1, 1)
    j = torch.arange(T).view(1, -1)
    mod, keep = (lambda s: s), None
    if case == "plain":
        args = [q, k, v, sc]
    elif case == "causal":
        args, keep = [q, k, v, sc], j <= i
    elif case == "sliding_window":
        args, keep = [q, k, v, sc], (j <= i) & (i - j < 1024)
    elif case in ("softcap", "softcap_unbatched_f32"):
        cap = 50.0
        args, mod = [q, k, v, sc, torch.tensor(cap)], lambda s: cap * torch.tanh(s / cap)
    elif case == "alibi":
        slope = r(B).float() * 0.1
        args = [q, k, v, sc, slope]
        mod = lambda s: s + slope.double().view(-1, 1, 1) * (j - i).double()
    else:  # documents of about 150 tokens; one id sequence per batch for queries and keys
        ids = torch.cumsum(torch.rand(B, max(S, T), generator=g) < 1 / 150, dim=1).int()
        dq, dk = ids[:, :S].contiguous(), ids[:, :T].contiguous()
        args, keep = [q, k, v, sc, dq, dk], dq.unsqueeze(2) == dk.unsqueeze(1)
    s = mod((q.double() @ k.double().transpose(-2, -1)) * scale)
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    want = torch.softmax(s, dim=-1) @ v.double()
    return [a.to(dev) for a in args], want


def time_us(f, args, n=20):
    """Microseconds per call of `f` on the GPU."""
    f(*args)
    torch.cuda.synchronize()
    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    e[0].record()
    for _ in range(n):
        f(*args)
    e[1].record()
    torch.cuda.synchronize()
    return e[0].elapsed_time(e[1]) * 1000 / n


cases = ["plain", "causal", "sliding_window", "softcap", "softcap_unbatched_f32", "alibi", "document"]
sizes = [tuple(map(int, s.split(","))) for s in sys.argv[1:]] or [(16, 2048, 2048), (3, 1000, 1037)]
bad = 0
for case in cases:
    torch._dynamo.reset()  # as peers.py does per session: flex_attention's recompiles are limited
    flex = load(case)
    for B, S, T in sizes:
        args, want = case_inputs(case, B, S, T, torch.Generator().manual_seed(0))
        got = flex(*args).double().cpu()
        err = ((got - want).norm() / want.norm()).item()
        ok = err < 1e-2 and bool(torch.isfinite(got).all())
        bad += not ok
        t = "  %.1f us" % time_us(flex, args) if dev == "cuda" else ""
        print("%-22s B=%d,S=%d,T=%d  rel L2 %.2e  %s%s" % (case, B, S, T, err, "PASS" if ok else "FAIL", t), flush=True)
print("%d failed" % bad)
sys.exit(1 if bad else 0)
