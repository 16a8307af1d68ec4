"""The hopfuse package on an H100 with real torch (scripts/python-device-check.sh runs it).

Each check runs on its own and records its outcome; one failing does not stop the others. For
each program: compile, call on torch CUDA tensors (regular and ragged sizes), compare with
torch eager (the program's PyTorch twin, and a hand-written reference where there is one),
then as a custom op under torch.compile (fullgraph) and CUDA graph capture, torch.library.opcheck,
and the launch overhead of a cached call next to bare cuLaunchKernels of the same CUBIN.
Writes results.json and summary.md into the directory given as argv[1]; exits 1 when a check
failed.
"""

import json
import os
import pathlib
import platform
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "python-device-check")
OUT.mkdir(parents=True, exist_ok=True)
RESULTS = {"checks": [], "environment": {}}


def save():
    (OUT / "results.json").write_text(json.dumps(RESULTS, indent=2, default=str))
    lines = ["# hopfuse Python package on the device", ""]
    for k, v in RESULTS["environment"].items():
        lines.append("- %s: %s" % (k, v))
    lines += ["", "| check | ok | details |", "| --- | --- | --- |"]
    for c in RESULTS["checks"]:
        details = c.get("error", "").strip().splitlines()[-1:] if not c["ok"] else [c.get("summary", "")]
        lines.append("| %s | %s | %s |" % (c["name"], "yes" if c["ok"] else "NO", (details[0] if details else "").replace("|", "/")))
    if "overhead" in RESULTS:
        lines += ["", "## Launch overhead", "", "```", json.dumps(RESULTS["overhead"], indent=2), "```"]
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")


def check(name):
    def wrap(fn):
        start = time.perf_counter()
        entry = {"name": name}
        try:
            summary = fn()
            entry.update(ok=True, summary=summary if isinstance(summary, str) else json.dumps(summary, default=str))
        except Exception:  # noqa: BLE001 (every failure is recorded, the run goes on)
            entry.update(ok=False, error=traceback.format_exc())
        entry["seconds"] = round(time.perf_counter() - start, 3)
        RESULTS["checks"].append(entry)
        print("%-60s %s (%.1f s)" % (name, "ok" if entry["ok"] else "FAILED", entry["seconds"]), flush=True)
        if not entry["ok"]:
            print(entry["error"], flush=True)
        save()
        return fn

    return wrap


import torch  # noqa: E402

RESULTS["environment"].update(
    python=platform.python_version(),
    torch=torch.__version__,
    torch_cuda=torch.version.cuda,
    device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    HOPFUSE_CUDA_INCLUDE=os.environ.get("HOPFUSE_CUDA_INCLUDE"),
)
save()

try:
    import hopfuse  # noqa: E402
except Exception:  # noqa: BLE001 (recorded: nothing else can run)
    RESULTS["checks"].append({"name": "import hopfuse", "ok": False, "error": traceback.format_exc()})
    save()
    print(RESULTS["checks"][-1]["error"])
    sys.exit(1)

RESULTS["environment"]["hopfuse_file"] = hopfuse.__file__
RESULTS["environment"]["nvrtc_and_driver_loadable"] = hopfuse.available()
RESULTS["environment"]["HOPFUSE_CUDA_INCLUDE_after_import"] = os.environ.get("HOPFUSE_CUDA_INCLUDE")
save()


def source(path):
    return (ROOT / "examples" / path).read_text()


def twin(kernel):
    """The program's PyTorch twin as a function."""
    text, name = kernel.torch_twin()
    scope = {}
    exec(compile(text, "<twin of %s>" % kernel.name, "exec"), scope)  # noqa: S102 (our own emitted code)
    return scope[name]


def compare(name, got, want, rtol, atol):
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        raise AssertionError("%s: shape %s, torch %s" % (name, tuple(got.shape), tuple(want.shape)))
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
    if bad.any():
        i = bad.nonzero()[0].tolist()
        raise AssertionError(
            "%s: %d of %d elements differ beyond rtol=%g atol=%g; first at %s: %r vs torch %r"
            % (name, int(bad.sum()), got.numel(), rtol, atol, i, got[tuple(i)].item(), want[tuple(i)].item())
        )
    return float((got - want).abs().max())


def inputs_for(kernel, sizes, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for i in kernel.inputs:
        shape = tuple(hopfuse._eval(e, sizes) for e in i.dims)
        dtype = getattr(torch, hopfuse._TORCH_DTYPES[i.dtype])
        out.append(torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype))
    return out


# program, sizes to try (regular, then ragged), tolerance (rtol, atol), hand reference or None
CASES = [
    ("basics/add.hf", [dict(M=4096, N=4096), dict(M=1000, N=1000), dict(M=777, N=1025), dict(M=1, N=3)], (0, 0), lambda a, b: a + b),
    ("basics/row_sum.hf", [dict(M=1024, N=4096), dict(M=333, N=1001), dict(M=5, N=3)], (1e-4, 1e-3), lambda x: x.double().sum(1)),
    ("basics/softmax.hf", [dict(M=512, N=1024), dict(M=37, N=1000)], (1e-4, 1e-6), None),
    ("tma/add_2d.hf", [dict(M=4096, N=4096), dict(M=1001, N=1028)], (0, 0), lambda a, b: a + b),
    (
        "matmul/step3_warp_specialized.hf",
        [dict(M=1024, N=1024, K=1024), dict(M=1000, N=776, K=264), dict(M=64, N=200, K=64)],
        (2e-2, 2e-2),
        lambda a, b: (a.float() @ b.float().T),
    ),
    (
        "matmul/step9_tma_store_epilogue.hf",
        [dict(M=1024, N=1024, K=1024), dict(M=1000, N=1000, K=256)],
        (2e-2, 2e-2),
        None,
    ),
]

KERNELS = {}

for path, size_list, (rtol, atol), reference in CASES:

    @check("compile %s" % path)
    def _compile(path=path):
        k = hopfuse.compile(source(path))
        KERNELS[path] = k
        return repr(k)

    for sizes in size_list:

        @check("call %s %s" % (path, ",".join("%s=%d" % kv for kv in sizes.items())))
        def _call(path=path, sizes=sizes, rtol=rtol, atol=atol, reference=reference):
            k = KERNELS[path]
            args = inputs_for(k, sizes, seed=sum(sizes.values()))
            spec = k.specialize(sizes)
            t0 = time.perf_counter()
            out = k(*args)
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            outs = out if isinstance(out, tuple) else (out,)
            want = twin(k)(*args)
            wants = want if isinstance(want, tuple) else (want,)
            errs = [compare("%s vs twin" % o.name, g, w, rtol, atol) for o, g, w in zip(k.outputs, outs, wants)]
            if reference is not None:
                errs.append(compare("vs hand reference", outs[0], reference(*args), rtol, atol))
            # A second call reuses everything (and must give the same result).
            again = k(*args)
            again = again if isinstance(again, tuple) else (again,)
            same = all(torch.equal(a, b) for a, b in zip(again, outs))
            return dict(
                index=spec.index_type[0],
                launch=spec.launch_dims,
                first_call_s=round(first, 3),
                max_abs_err=errs,
                deterministic=same,
            )


@check("a scalar keyword argument (y = x * s)")
def _scalar():
    program = "fusion scale {\n  input x: f32[N]\n  input s: f32\n  y = x * s\n  output y\n}\n"
    k = hopfuse.compile(program, schedule="y.split(0, 128)\ny.parallelize(0, BIDx)\ny.parallelize(1, TIDx)")
    x = torch.randn(1000, device="cuda")
    errs = [compare("x * %g" % s, k(x, s=s), x * s, 0, 0) for s in (2.5, -0.125)]
    op = hopfuse.torch_op("hopfuse_check::scale", k)
    compiled = torch.compile(lambda x: op(x, s=3.0) + 1.0, fullgraph=True)
    errs.append(compare("compiled", compiled(x), x * 3.0 + 1.0, 1e-6, 1e-6))
    return errs


@check("torch.compile (fullgraph) with the custom op, add and row_sum")
def _compiled():
    add = hopfuse.torch_op("hopfuse_check::add", source("basics/add.hf"))
    row_sum = hopfuse.torch_op("hopfuse_check::row_sum", source("basics/row_sum.hf"))

    def block(a, b):
        return row_sum(add(a, b) * 2.0) + 1.0

    compiled = torch.compile(block, fullgraph=True)
    results = []
    for m, n in ((256, 1024), (100, 1000), (300, 1000)):
        a = torch.randn(m, n, device="cuda")
        b = torch.randn(m, n, device="cuda")
        got = compiled(a, b)
        want = ((a + b) * 2.0).double().sum(1) + 1.0
        results.append(compare("compiled block %dx%d" % (m, n), got, want, 1e-4, 1e-3))
    return dict(max_abs_err=results)


@check("torch.library.opcheck on the custom op")
def _opcheck():
    try:
        add = torch.ops.hopfuse_check.add
    except (AttributeError, RuntimeError):  # the torch.compile check did not register it
        add = hopfuse.torch_op("hopfuse_check::add", source("basics/add.hf"))
    a = torch.randn(64, 256, device="cuda")
    b = torch.randn(64, 256, device="cuda")
    report = torch.library.opcheck(add, (a, b))
    return {k: str(v) for k, v in report.items()}


@check("CUDA graph capture and replay (add, tma/add_2d)")
def _graph():
    summary = {}
    for path in ("basics/add.hf", "tma/add_2d.hf"):
        k = hopfuse.compile(source(path))
        a = torch.randn(512, 1024, device="cuda")
        b = torch.randn(512, 1024, device="cuda")
        k(a, b)  # compiles and loads outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            c = k(a, b)
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        g.replay()
        torch.cuda.synchronize()
        summary[path] = compare("graph replay " + path, c, a + b, 0, 0)
    return summary


@check("a non-default stream")
def _stream():
    k = hopfuse.compile(source("basics/add.hf"))
    s = torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        c = k(a, b)
    s.synchronize()
    return compare("on a side stream", c, a + b, 0, 0)


@check("errors: dtype, shape, cpu tensor")
def _errors():
    k = hopfuse.compile(source("basics/add.hf"))
    a = torch.randn(8, 16, device="cuda")
    square = torch.randn(16, 16, device="cuda")
    seen = []
    for args, kind in (
        ((a, a.half()), hopfuse.DTypeError),
        ((a, a[:, :8].contiguous()), hopfuse.ShapeError),
        ((a, a.cpu()), ValueError),
        ((square, square.t()), hopfuse.ShapeError),  # not contiguous
        ((torch.randn(8 * 16 + 1, device="cuda")[1:].view(8, 16), a), ValueError),  # 4 bytes off
    ):
        try:
            k(*args)
        except kind as e:
            seen.append(str(e))
        else:
            raise AssertionError("no %s for %s" % (kind.__name__, [tuple(t.shape) for t in args]))
    return seen


@check("launch overhead: cached call vs bare cuLaunchKernel of the same CUBIN")
def _overhead():
    k = hopfuse.compile(source("basics/add.hf"))
    a = torch.randn(1, 4, device="cuda")
    b = torch.randn(1, 4, device="cuda")
    c = k(a, b)
    spec = k.specialize({"M": 1, "N": 4})
    stream = torch.cuda.current_stream().cuda_stream
    device = torch.cuda.current_device()
    n = 5000
    rounds = {"hopfuse_call_us": [], "bare_launch_us": [], "torch_add_us": []}
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            k(a, b)
        rounds["hopfuse_call_us"].append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
        seconds = spec.time_bare_launches(device, stream, [a.data_ptr(), b.data_ptr(), c.data_ptr()], n)
        rounds["bare_launch_us"].append(seconds / n * 1e6)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            torch.add(a, b)
        rounds["torch_add_us"].append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    best = {k2: round(min(v), 2) for k2, v in rounds.items()}
    best["overhead_over_bare_us"] = round(best["hopfuse_call_us"] - best["bare_launch_us"], 2)
    best["method"] = (
        "host time per enqueue, %d back-to-back launches of add.hf on [1, 4] f32 (outputs allocated per call), "
        "best of 5 rounds; bare = the same CUBIN and arguments, cuLaunchKernel in a Rust loop" % n
    )
    RESULTS["overhead"] = dict(best, rounds=rounds)
    if best["overhead_over_bare_us"] > 10:
        raise AssertionError("a cached call costs %.1f us over a bare launch (budget 10 us)" % best["overhead_over_bare_us"])
    return best


save()
failed = [c["name"] for c in RESULTS["checks"] if not c["ok"]]
print("\n%d checks, %d failed%s" % (len(RESULTS["checks"]), len(failed), (": " + "; ".join(failed)) if failed else ""))
print("results in %s" % OUT)
sys.exit(1 if failed else 0)
