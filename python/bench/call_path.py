"""The Python side of a cached call's host time, without a GPU: `add.hf` on [1, 4] f32 called
20,000 times (best of 5, process CPU time: the machine may be shared) with the native launch replaced by a no-op, next to the stand-in's
`torch.empty` (the output's allocation, which real torch does in about 3 us on the device).
The stand-in's `data_ptr`, `is_contiguous` and device hash are Python functions where torch's
are C; the input tensors get C-level ones (a bound `int.__index__`, `True.__bool__`, a device
hashed as a tuple) so that what is timed is the wrapper's own work. A development measurement
of the wrapper the launch-overhead budget is about (issue 37); the whole call is measured on
the device by scripts/launch_overhead.py. Not part of the package.

    PYTHONPATH=.tools/python-test:runner/peers/fake_torch python3 python/bench/call_path.py
"""

import pathlib
import time

import hopfuse
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def best_us(f, n=20000):
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(n):
            f()
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


class _Device(tuple):
    """A device hashed and compared in C, with torch.device's `type` and `index`."""

    type = property(lambda self: self[0])
    index = property(lambda self: self[1])

    def __str__(self):
        return "%s:%d" % self


def with_c_accessors(t):
    t.data_ptr = t.data_ptr().__index__
    t.is_contiguous = True.__bool__
    t.device = _Device(("cuda", t.device.index))
    return t


def main():
    k = hopfuse.compile((ROOT / "examples/basics/add.hf").read_text())
    a = with_c_accessors(torch.empty((1, 4), dtype=torch.float32, device="cuda"))
    b = with_c_accessors(torch.empty((1, 4), dtype=torch.float32, device="cuda"))
    if hopfuse.available()[1]:
        raise SystemExit("a GPU driver is loaded: run scripts/launch_overhead.py instead")
    try:
        k(a, b)
    except RuntimeError:
        pass  # no GPU: the call was prepared and remembered before the launch failed
    (call,) = k._calls.values()
    call.launch = lambda stream, addresses, scalars: None
    call.bind()
    device = call.device
    call_us = best_us(lambda: k(a, b))
    empty_us = best_us(lambda: torch.empty((1, 4), dtype=torch.float32, device=device))
    print("cached call, launch stubbed   %6.2f us" % call_us)
    print("stand-in torch.empty          %6.2f us" % empty_us)
    print("the wrapper without the empty %6.2f us" % (call_us - empty_us))


if __name__ == "__main__":
    main()
