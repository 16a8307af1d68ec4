"""Launch overhead, broken down (docs/benchmarks.md "Export and launch overhead"): run on the device
with the wheel on PYTHONPATH and torch, from the repository root: python3 scripts/launch_overhead.py"""
import sys, time, pathlib
import torch, hopfuse
src = pathlib.Path("examples/basics/add.hf").read_text()
k = hopfuse.compile(src)
a = torch.randn(1, 4, device="cuda"); b = torch.randn(1, 4, device="cuda")
c = k(a, b); torch.cuda.synchronize()
spec = k.specialize({"M": 1, "N": 4})
dev = torch.cuda.current_device()
stream = torch.cuda.current_stream().cuda_stream
ptrs = [a.data_ptr(), b.data_ptr(), c.data_ptr()]
call = next(iter(k._calls.values()))
def t(name, f, n=20000):
    best = 1e9
    for _ in range(3):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    print("%-40s %7.2f us" % (name, best), flush=True)
t("full call", lambda: k(a, b))
t("spec.launch (arguments built per launch)", lambda: spec.launch(dev, stream, ptrs, None))
t("the call's launcher (arguments built once)", lambda: call.launch(stream, ptrs, []))
t("the call's run (allocate, launch)", lambda: call.run(a, b, []))
t("torch.empty", lambda: torch.empty((1, 4), dtype=torch.float32, device=call.device))
t("key", lambda: tuple(map(hopfuse._SIGNATURE, (a, b))))
t("contiguity", lambda: a.is_contiguous() and b.is_contiguous())
t("addresses", lambda: [a.data_ptr(), b.data_ptr(), c.data_ptr()])
raw = torch._C._cuda_getCurrentRawStream
t("raw stream", lambda: raw(dev))
t("torch.add", lambda: torch.add(a, b))
t("bare launch python loop x1", lambda: spec.time_bare_launches(dev, stream, ptrs, 1))
print("bare rust loop per launch", spec.time_bare_launches(dev, stream, ptrs, 20000) / 20000 * 1e6)
