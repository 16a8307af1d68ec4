"""One exported kernel (or a fusion exported as several) on the device (scripts/export-device-check.sh): random inputs written as
raw files, the export's C++ program run on them, the Python launcher run on the same tensors,
both compared with the export's PyTorch twin on the same inputs. Prints one markdown row;
exits 1 when either launcher's outputs differ.

    python3 scripts/export_device_check.py DIR KERNEL EXAMPLE SIZES
"""

import importlib
import json
import subprocess
import sys

import torch

directory, kernel, example, sizes = sys.argv[1:5]
sys.path.insert(0, directory)
launcher = importlib.import_module(kernel)
with open("%s/plan.json" % directory) as f:
    plan = json.load(f)
twin_spec = plan["torch_twin"]
# A fusion exported as several kernels: its program loads every kernel's CUBIN from a directory.
cubins = directory if "kernels" in plan else "%s/%s.cubin" % (directory, kernel)
twin = getattr(importlib.import_module(twin_spec["module"]), twin_spec["function"])

torch.manual_seed(0)
named = {}
for name, dtype, shape, role in launcher.TENSORS:
    if role != "input":
        continue
    t = torch.randn(shape, dtype=torch.float32, device="cuda").to(dtype)
    t.cpu().contiguous().view(torch.uint8).numpy().tofile("%s/%s.bin" % (directory, name))
    named[name] = t
inputs = list(named.values())
# The C++ program gives a scalar without a value 1; so does this check.
scalars = {n: (1.0 if v is None else v) for n, v in launcher.SCALARS.items()}


def reference():
    """The twin as written (its dtypes and casts), on the same inputs."""
    args = [named[n] if n in named else torch.tensor(scalars[n], device="cuda") for n in twin_spec["arguments"]]
    out = twin(*args)
    return out if isinstance(out, tuple) else (out,)


def close(got, want):
    tol = {torch.float32: 1e-4, torch.float64: 1e-9}.get(got.dtype, 2e-2)
    got, want = got.double(), want.double().to(got.device)
    scale = want.abs().max().item() or 1.0
    err = (got - want).abs().max().item() / scale
    return err <= tol, err


want = reference()
outputs = [(n, d, s) for n, d, s, role in launcher.TENSORS if role == "output"]
cells = []
run = subprocess.run([directory + "/main", cubins, directory], capture_output=True, text=True)
if run.returncode != 0:
    cells.append("FAIL: %s" % (run.stderr.strip().splitlines() or ["exit %d" % run.returncode])[-1])
else:
    errs = []
    for (name, dtype, shape), w in zip(outputs, want):
        raw = torch.from_file("%s/%s.out.bin" % (directory, name), size=w.numel() * w.element_size(), dtype=torch.uint8)
        got = raw.view(dtype).reshape(shape)
        errs.append(close(got, w))
    cells.append(("PASS" if all(ok for ok, _ in errs) else "FAIL") + " (max rel err %.2e)" % max(e for _, e in errs))
try:
    got = launcher.launch(*inputs, **scalars)
    torch.cuda.synchronize()
    got = got if isinstance(got, tuple) else (got,)
    errs = [close(g, w) for g, w in zip(got, want)]
    cells.append(("PASS" if all(ok for ok, _ in errs) else "FAIL") + " (max rel err %.2e)" % max(e for _, e in errs))
except Exception as e:  # noqa: BLE001 (the row says what failed)
    cells.append("FAIL: %s" % e)
print("| %s | %s | %s | %s |" % (example, sizes, cells[0], cells[1]))
sys.exit(0 if all(c.startswith("PASS") for c in cells) else 1)
