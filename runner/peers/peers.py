"""hopfuse peers: times a fusion's torch twin (eager and under torch.compile) for the runner.

Driven by `runner/src/peers.rs` over stdin/stdout, one JSON object per line. The runner embeds
this file and starts it as `python3 -u peers.py` (`$HOPFUSE_PYTHON` picks the interpreter).

  start      -> {"event":"hello","torch":VERSION,"device":NAME}
                or {"event":"unavailable","reason":WHY} and exit (no torch, no CUDA)
  {"cmd":"setup", "dir", "twin", "function", "inputs":[{"name","file","dtype","shape"}],
   "outputs":[{"name","dtype","shape"}], "l2":{"kind":"none"|"rotate"|"flush",...},
   "peers":["eager","torch.compile"], "extra":[{"name","twin","function"}], "hold_ns_per_call"}
             -> {"event":"setup","peers":[{"name","compile_s","outputs":[{"name","file"}],
                "error"}]}: the inputs (raw little-endian files, the runner's exact data) are
                loaded onto the GPU, each peer is called once (torch.compile compiles and
                autotunes then: `compile_s` is that first call, never part of the timing) and
                its outputs are written next to the inputs for the runner to validate.
  {"cmd":"time","warmup":W,"iters":N,"round":R}
             -> {"event":"timed","samples":{NAME:[us,...]}}: per peer, W untimed calls, then N
                calls each between two CUDA events, with the run's L2 policy before every call
                (a rotation of input copies or a flush, outside the events); the stream is held
                by torch.cuda._sleep while the calls are enqueued, as the runner holds it with
                its spin kernel, so both measure GPU time. Peers alternate order by round.
  {"cmd":"end"} -> {"event":"ended"}: the session's tensors are freed; the next setup may follow.
  any failure -> {"event":"error","message":...}; the session is over.

Numerics: TF32 off and no reduced-precision split-K reductions in half GEMMs, so each peer
computes what the kernel computes (f32 accumulation; see compiler/src/torch.rs).
"""

import importlib.util
import json
import math
import os
import sys
import time
import traceback

# The protocol owns the real stdout; anything else printed (by torch, Triton, a twin) goes to
# stderr, which the runner passes through.
_proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr


def send(obj):
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


try:
    import torch
except Exception as e:  # noqa: BLE001 (any import failure means no peers)
    send({"event": "unavailable", "reason": "cannot import torch: %s" % e})
    sys.exit(0)

if not torch.cuda.is_available():
    send({"event": "unavailable", "reason": "torch %s sees no CUDA device" % torch.__version__})
    sys.exit(0)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False

# Cycles per nanosecond for torch.cuda._sleep; a faster clock only holds the stream longer.
SLEEP_CYCLES_PER_NS = 2.0
MAX_HOLD_NS = 200_000_000


def dtype_of(name):
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError("unknown dtype %r" % name)
    return dt


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def load(spec):
    """An input on the GPU from its raw little-endian file."""
    dt, shape = dtype_of(spec["dtype"]), tuple(spec["shape"])
    cpu = torch.from_file(spec["file"], shared=False, size=numel(shape), dtype=dt)
    return cpu.reshape(shape).cuda()


def save(t, path):
    """A tensor's bytes, little-endian, row-major, to `path`."""
    flat = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
    with open(path, "wb") as f:
        f.truncate(flat.numel())
    if flat.numel():
        torch.from_file(path, shared=True, size=flat.numel(), dtype=torch.uint8).copy_(flat)


def load_twin(directory, source, function):
    path = os.path.join(directory, "twin_%s.py" % function)
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("hopfuse_twin_" + function, path)
    module = importlib.util.module_from_spec(spec)
    # Registered under its name: torch.compile (Dynamo) re-imports a function's module by name
    # to read its globals (a FlexAttention score_mod calling `torch.tanh`).
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, function)


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def forget_compiles():
    """Drops torch.compile's compiled code of earlier sessions. Every FlexAttention peer calls
    the one `flex_attention` compiled, so each session's shape and score_mod is a recompile of
    the same code, and past Dynamo's recompile limit (8) it silently runs eagerly: a session
    starts from none."""
    try:
        import torch._dynamo as dynamo
    except ImportError:  # the fake torch has no Dynamo (nor compiles)
        return
    dynamo.reset()


class Session:
    def __init__(self, req):
        forget_compiles()
        self.dir = req["dir"]
        self.outputs = req["outputs"]
        # Eager calls launch several kernels from Python: hold the stream longer per call than
        # the runner does per launch, so the GPU never waits for the host while timing.
        self.hold_ns = req.get("hold_ns_per_call", 100_000)
        fn = load_twin(self.dir, req["twin"], req["function"])
        # Other functions computing the same, called as they are (the cuBLASLt epilogue,
        # torch._scaled_mm, SDPA, cuDNN SDPA and FlexAttention for attention).
        extra = {e["name"]: load_twin(self.dir, e["twin"], e["function"]) for e in req.get("extra", [])}
        inputs = [load(s) for s in req["inputs"]]
        l2 = req.get("l2") or {"kind": "none"}
        self.sets = [inputs]
        self.flush = None
        if l2["kind"] == "rotate":
            for _ in range(1, int(l2["sets"])):
                self.sets.append([t.clone() for t in inputs])
        elif l2["kind"] == "flush":
            self.flush = torch.empty(int(l2["bytes"]), dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        self.peers = []
        report = []
        for name in list(req["peers"]) + list(extra):
            entry = {"name": name, "compile_s": None, "outputs": [], "error": None}
            try:
                call = extra[name] if name in extra else self.make(name, fn)
                start = time.perf_counter()
                outs = as_tuple(call(*self.sets[0]))
                torch.cuda.synchronize()
                if name == "torch.compile":
                    entry["compile_s"] = time.perf_counter() - start
                if len(outs) != len(self.outputs):
                    raise ValueError("%d outputs, expected %d" % (len(outs), len(self.outputs)))
                for spec, out in zip(self.outputs, outs):
                    want = (dtype_of(spec["dtype"]), tuple(spec["shape"]))
                    if (out.dtype, tuple(out.shape)) != want:
                        raise ValueError(
                            "output %s is %s%s, expected %s%s"
                            % (spec["name"], out.dtype, tuple(out.shape), want[0], want[1])
                        )
                    path = os.path.join(self.dir, "%s__%s.bin" % (slug(name), spec["name"]))
                    save(out, path)
                    entry["outputs"].append({"name": spec["name"], "file": path})
                self.peers.append((name, call))
            except Exception as e:  # noqa: BLE001 (a failing peer is reported, not fatal)
                entry["error"] = "%s: %s" % (type(e).__name__, e)
                traceback.print_exc()
            report.append(entry)
        send({"event": "setup", "peers": report})

    @staticmethod
    def make(name, fn):
        if name == "eager":
            return fn
        if name == "torch.compile":
            return torch.compile(fn, dynamic=False)
        raise ValueError("unknown peer %r" % name)

    def before(self):
        if self.flush is not None:
            self.flush.zero_()

    def time_one(self, call, warmup, iters):
        nsets = len(self.sets)
        k = 0
        for _ in range(warmup):
            self.before()
            call(*self.sets[k % nsets])
            k += 1
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        torch.cuda.synchronize()
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is not None:
            hold = min((warmup + iters) * self.hold_ns + 1_000_000, MAX_HOLD_NS)
            sleep(int(hold * SLEEP_CYCLES_PER_NS))
        for start, end in events:
            self.before()
            start.record()
            call(*self.sets[k % nsets])
            end.record()
            k += 1
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1000.0 for start, end in events]

    def time(self, req):
        order = self.peers if req.get("round", 0) % 2 == 0 else list(reversed(self.peers))
        samples = {}
        for name, call in order:
            samples[name] = self.time_one(call, int(req["warmup"]), int(req["iters"]))
        for name, us in samples.items():
            if not all(math.isfinite(u) for u in us):
                raise ValueError("peer %s: non-finite timing samples" % name)
        send({"event": "timed", "samples": samples})


def slug(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def main():
    send({"event": "hello", "torch": torch.__version__, "device": torch.cuda.get_device_name(0)})
    session = None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "setup":
                session = None
                session = Session(req)
            elif cmd == "time":
                if session is None:
                    raise ValueError("time before setup")
                session.time(req)
            elif cmd == "end":
                session = None
                torch.cuda.empty_cache()
                send({"event": "ended"})
            else:
                raise ValueError("unknown command %r" % cmd)
        except Exception as e:  # noqa: BLE001 (reported to the runner, which stops the session)
            traceback.print_exc()
            session = None
            send({"event": "error", "message": "%s: %s" % (type(e).__name__, e)})


if __name__ == "__main__":
    main()
