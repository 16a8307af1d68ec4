"""hopfuse kernels on PyTorch tensors.

    import hopfuse
    add = hopfuse.compile(open("examples/basics/add.hf").read())
    c = add(a, b)  # a, b: torch CUDA tensors; c is allocated with torch

`compile` lowers the program once to learn its signature (a `CompileError` with every problem
at its line and column otherwise). A call checks the tensors against the fusion: dtype, rank
and shape (`DTypeError`, `ShapeError`, naming the tensor and the rule), device, contiguity and
16-byte alignment; binds the size symbols from the shapes; compiles the kernel for those sizes
(the index type and aligned vector accesses they allow, the plan's constraints checked: a
`ValueError` naming the rule) once per distinct sizes, NVRTC once per distinct CUDA source with
a disk cache (`$HOPFUSE_CACHE_DIR`, else `~/.cache/hopfuse/cubin`); allocates the outputs with
torch; and launches on torch's current stream in the device's primary context (torch's). Scalar
inputs (`input eps: f32[]`) are keyword arguments. A call with the shapes, dtypes and devices of
an earlier one reuses what that call prepared (the launcher with its arguments built once): it
checks contiguity (and the launcher alignment), allocates the outputs and launches.

`torch_op` registers a kernel as a `torch.library.custom_op` with a fake implementation (the
output shapes from the input shapes, no GPU), so it can sit inside `torch.compile`d code.

torch is imported on first use, never at import: the package imports without it.
"""

import ctypes
import importlib.util
import operator
import os


def _use_pip_cuda():
    """NVRTC 13 and the CUDA headers from the NVIDIA wheels torch's CUDA 13 builds depend on
    (`nvidia/cu13/lib/libnvrtc.so.13`, `nvidia/cu13/include`), when present: the library is
    loaded so that the native module's `dlopen("libnvrtc.so.13")` finds it, and
    `HOPFUSE_CUDA_INCLUDE` names the headers unless it is set."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    for base in (spec.submodule_search_locations or []) if spec else []:
        root = os.path.join(base, "cu13")
        include = os.path.join(root, "include")
        if not os.environ.get("HOPFUSE_CUDA_INCLUDE") and os.path.isfile(os.path.join(include, "cuda_fp16.h")):
            os.environ["HOPFUSE_CUDA_INCLUDE"] = include
        nvrtc = os.path.join(root, "lib", "libnvrtc.so.13")
        if os.path.isfile(nvrtc):
            try:
                ctypes.CDLL(nvrtc, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # hopfuse.available() then reports NVRTC missing, with the usual hint
            return


_use_pip_cuda()

from ._native import CompileError, MisalignedError, Program, Specialization, available  # noqa: E402

__all__ = [
    "CompileError",
    "DTypeError",
    "Kernel",
    "ShapeError",
    "available",
    "compile",
    "torch_op",
]

# The fusion's dtype names and torch's.
_TORCH_DTYPES = {
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "f64": "float64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "i64": "int64",
    "i32": "int32",
    "i8": "int8",
    "u8": "uint8",
    "bool": "bool",
}
# Schema types of scalar keyword arguments in a custom op.
_SCHEMA_SCALARS = {
    "f32": "float",
    "f16": "float",
    "bf16": "float",
    "f64": "float",
    "f8e4m3": "float",
    "f8e5m2": "float",
    "i64": "int",
    "i32": "int",
    "i8": "int",
    "u8": "int",
    "bool": "bool",
}
# Bytes a tensor's address must be a multiple of (vector accesses and TMA need 16).
_ALIGNMENT = 16


class ShapeError(ValueError):
    """A tensor's rank or shape does not fit the fusion (the message names the tensor)."""


class DTypeError(TypeError):
    """A tensor's dtype is not the one the fusion declares (the message names the tensor)."""


_TORCH = []


def _torch():
    if not _TORCH:
        import torch

        _TORCH.append(torch)
    return _TORCH[0]


def _dims_text(dims):
    return "[" + ", ".join(_expr_text(d) for d in dims) + "]"


def _expr_text(e):
    tag = e[0]
    if tag == "const":
        return str(e[1])
    if tag == "sym":
        return e[1]
    if tag == "ceil_div":
        return "ceilDiv(%s, %s)" % (_expr_text(e[1]), _expr_text(e[2]))
    if tag == "max":
        return "max(%s, %s)" % (_expr_text(e[1]), _expr_text(e[2]))
    op = {"add": " + ", "mul": " * "}[tag]
    return "(" + _expr_text(e[1]) + op + _expr_text(e[2]) + ")"


def _eval(e, sizes):
    """A size expression's value; works on torch's symbolic ints too (under torch.compile)."""
    tag = e[0]
    if tag == "const":
        return e[1]
    if tag == "sym":
        return sizes[e[1]]
    a, b = _eval(e[1], sizes), _eval(e[2], sizes)
    if tag == "add":
        return a + b
    if tag == "mul":
        return a * b
    if tag == "ceil_div":
        return -(-a // b)
    if tag == "max":
        return a if a >= b else b
    raise ValueError("unknown size expression %r" % (e,))


class _Input:
    __slots__ = ("name", "dtype", "dims")

    def __init__(self, name, dtype, dims):
        self.name, self.dtype, self.dims = name, dtype, dims

    def declared(self):
        return "%s: %s%s" % (self.name, self.dtype, _dims_text(self.dims) if self.dims else "")


# The cache key of a call (shape, dtype and device of every input), read as the generated call
# function (`_call_function`) reads it.
_SIGNATURE = operator.attrgetter("shape", "dtype", "device")

# A repeated call is the launch-overhead budget's (issue 37): its Python runs through functions
# generated for the kernel's number of inputs and each call's buffers, as Triton generates its
# launchers, so that the cache key, the contiguity check and the launch's addresses are single
# expressions rather than loops over the tensors (1.3 us a call less than loops, measured with
# python/bench/call_path.py).


def _call_function(inputs):
    """A factory of the function a kernel with `inputs` tensor arguments is called through:
    `make(calls, first_call, check_placement, ordered_scalars, misaligned)` returns
    `call(*tensors, **scalars)`, which looks the inputs' key up in `calls` (`_Call`s; a new key,
    another argument count or a non-tensor goes to `first_call(tensors, scalars)`), checks
    contiguity (`check_placement(tensors)` raises, naming the tensor), takes the program's scalar
    values or `ordered_scalars(call, scalars)`, and runs the `_Call`; an address the launcher
    refuses (`misaligned`) is named by `check_placement`."""
    names = ["t%d" % i for i in range(inputs)]
    args = "".join(n + ", " for n in names)
    source = "\n".join(
        [
            "def make(calls, first_call, check_placement, ordered_scalars, misaligned):",
            "    def call(*tensors, **scalars):",
            "        try:",
            "            (%s) = tensors" % args,
            "            c = calls[(%s)]" % "".join("(%s.shape, %s.dtype, %s.device), " % (n, n, n) for n in names),
            "        except (KeyError, ValueError, AttributeError):",
            "            return first_call(tensors, scalars)",
            "        if not (%s):" % (" and ".join("%s.is_contiguous()" % n for n in names) or "True"),
            "            check_placement(tensors)",
            "        values = c.defaults if not scalars and c.defaults is not None else ordered_scalars(c, scalars)",
            "        try:",
            "            return c.run(%svalues)" % args,
            "        except misaligned:",
            "            check_placement(tensors)",
            "            raise",
            "    return call",
        ]
    )
    namespace = {}
    exec(source, namespace)  # noqa: S102 (generated from counts alone, no user text)
    return namespace["make"]


_RUN_FUNCTIONS = {}


def _run_function(inputs, allocations, outputs):
    """A factory of a `_Call`'s run function for `inputs` tensor arguments, `allocations`
    buffers allocated per call and the first `outputs` of them returned:
    `make(launch, stream, index, device, allocations)` returns `run(t0, ..., values)`, which
    allocates the buffers (`allocations`: `(torch.empty or torch.zeros, shape, dtype)`), launches
    with the inputs' addresses then the buffers', and returns the outputs (one bare)."""
    key = (inputs, allocations, outputs)
    make = _RUN_FUNCTIONS.get(key)
    if make is None:
        buffers = ["a%d" % j for j in range(allocations)]
        addresses = ["t%d.data_ptr()" % i for i in range(inputs)] + [b + ".data_ptr()" for b in buffers]
        returned = buffers[0] if outputs == 1 else "(%s)" % "".join(b + ", " for b in buffers[:outputs])
        lines = ["def make(launch, stream, index, device, allocations):"]
        lines += ["    (new%d, shape%d, dtype%d) = allocations[%d]" % (j, j, j, j) for j in range(allocations)]
        lines.append("    def run(%svalues):" % "".join("t%d, " % i for i in range(inputs)))
        lines += ["        a%d = new%d(shape%d, dtype=dtype%d, device=device)" % (j, j, j, j) for j in range(allocations)]
        lines.append("        launch(stream(index), [%s], values)" % ", ".join(addresses))
        lines.append("        return " + returned)
        lines.append("    return run")
        namespace = {}
        exec("\n".join(lines), namespace)  # noqa: S102 (generated from counts alone)
        make = _RUN_FUNCTIONS[key] = namespace["make"]
    return make


def _launch_layout(buffers, inputs):
    """How a launch gives a specialization's tensor parameters (`buffers`: `(role, dtype,
    shape, input position)` in the kernel's order) their addresses: `(allocated, address_of)`,
    the buffers a call allocates (the outputs in order, then scratch and workspace buffers) and,
    per parameter, the position of its address among the `inputs` inputs' (in argument order,
    an input the kernel does not read among them) followed by the allocated buffers'."""
    allocated = [b for b in buffers if b[0] == "output"] + [b for b in buffers if b[0] not in ("input", "output")]
    position = {id(b): inputs + i for i, b in enumerate(allocated)}
    return allocated, [b[3] if b[0] == "input" else position[id(b)] for b in buffers]


class _Call:
    """Everything a call with one tuple of input shapes, dtypes and devices needs once its
    checks passed, so that a repeated call does no per-call work but reading the addresses,
    allocating the outputs and one native launch:

    - `launch(stream, addresses, scalars)`: the native launcher, its arguments built once; it
      takes the inputs' addresses in argument order, then the `allocations`', and checks their
      alignment (`MisalignedError`);
    - `stream(index)`: torch's current stream on device `index` (`device`'s) as a raw handle;
    - `allocations`: `(torch.empty or torch.zeros, shape, dtype)`, the outputs first in
      declaration order, then the kernel's scratch and zeroed workspace buffers;
    - `inputs`, `outputs`: how many tensor arguments, and how many of `allocations` are
      returned (one bare, else a tuple);
    - `scalar_names`, `defaults`: the launcher's scalar order, and the program's values in it
      (None when a scalar has none: the call must give it);
    - `run(*inputs, values)`: all of it, made from the fields by `bind`."""

    __slots__ = (
        "launch",
        "stream",
        "index",
        "device",
        "allocations",
        "inputs",
        "outputs",
        "scalar_names",
        "defaults",
        "run",
    )

    def bind(self):
        """Makes `run` from the fields (again when one has changed)."""
        make = _run_function(self.inputs, len(self.allocations), self.outputs)
        self.run = make(self.launch, self.stream, self.index, self.device, self.allocations)


_RAW_STREAM = []


def _raw_stream(torch):
    """A function of a device index giving torch's current stream on it as a raw handle.
    `_cuda_getCurrentRawStream` (what Triton's launcher calls) skips building a
    `torch.cuda.Stream` object, a few microseconds a call; the public API where torch lacks it."""
    if not _RAW_STREAM:
        raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        _RAW_STREAM.append(raw or (lambda i: torch.cuda.current_stream(i).cuda_stream))
    return _RAW_STREAM[0]


class Kernel:
    """A compiled hopfuse program, callable on torch CUDA tensors: `kernel(*inputs, **scalars)`
    returns the outputs (one tensor, or a tuple in declaration order)."""

    def __init__(self, program):
        self._program = program
        self.name = program.name
        self.symbols = list(program.symbols)
        declared = [_Input(n, d, list(dims)) for n, d, dims in program.inputs]
        self.inputs = [i for i in declared if i.dims]
        self.scalars = [i for i in declared if not i.dims]
        self.outputs = [_Input(n, d, list(dims)) for n, d, dims in program.outputs]
        # Scalars the kernel reads (an unused scalar input is not a kernel parameter).
        self._used_scalars = {n for n, _, _ in program.scalars}
        # The values the program gives its scalars (`input eps: f32 = 1e-6`): keyword defaults.
        self._scalar_defaults = {n: v for n, _, v in program.scalars if v is not None}
        # sizes (in symbol order) -> (Specialization, [(role, torch dtype, shape, position)])
        self._specializations = {}
        # (shape, dtype, device) of every input -> _Call, once a call with them has been
        # checked: a repeated call skips binding, specializing and building arguments.
        self._calls = {}
        self._call = _call_function(len(self.inputs))(
            self._calls, self._first_call, self._check_placement, self._ordered_scalars, MisalignedError
        )
        # A fusion no scheduler takes whole runs as several kernels in order (`segments`): each
        # segment a Kernel of its own, the intermediates passed between them by name.
        split = program.segments
        self.segmented_because = None if split is None else split[0]
        self.segments = None if split is None else [Kernel(Program(source)) for source, _, _ in split[1]]

    def __repr__(self):
        args = ", ".join(i.declared() for i in self.inputs + self.scalars)
        outs = ", ".join(o.declared() for o in self.outputs)
        return "<hopfuse.Kernel %s(%s) -> %s>" % (self.name, args, outs)

    @property
    def source(self):
        """The program text."""
        return self._program.source

    def torch_twin(self):
        """The fusion as a PyTorch function, as the playground shows it: `(source, name)`, the
        source of a module defining the function `name`."""
        return self._program.torch_twin()

    # -- checking and binding
    def _bind(self, tensors, symbolic=False):
        """The size symbols' values from the tensors' shapes, after checking dtypes, ranks and
        shapes. With `symbolic`, dimensions may be torch's symbolic ints (no concrete checks
        beyond equality)."""
        torch = _torch()
        if len(tensors) != len(self.inputs):
            raise TypeError(
                "kernel `%s` takes %d tensor argument%s (%s), got %d"
                % (
                    self.name,
                    len(self.inputs),
                    "" if len(self.inputs) == 1 else "s",
                    ", ".join(i.name for i in self.inputs),
                    len(tensors),
                )
            )
        sizes, origin = {}, {}
        for spec, t in zip(self.inputs, tensors):
            if not isinstance(t, torch.Tensor):
                raise TypeError("input `%s` must be a torch.Tensor, not %s" % (spec.name, type(t).__name__))
            want = getattr(torch, _TORCH_DTYPES[spec.dtype])
            if t.dtype != want:
                raise DTypeError(
                    "input `%s` has dtype %s; the fusion declares %s (%s)" % (spec.name, t.dtype, spec.declared(), want)
                )
            shape = tuple(t.shape)
            if len(shape) != len(spec.dims):
                raise ShapeError(
                    "input `%s` has rank %d (shape %s); the fusion declares %s (rank %d)"
                    % (spec.name, len(shape), list(shape), spec.declared(), len(spec.dims))
                )
            for axis, (expr, n) in enumerate(zip(spec.dims, shape)):
                if expr[0] == "sym" and expr[1] not in sizes:
                    sizes[expr[1]] = n
                    origin[expr[1]] = "%s.shape[%d]" % (spec.name, axis)
        for spec, t in zip(self.inputs, tensors):
            for axis, (expr, n) in enumerate(zip(spec.dims, tuple(t.shape))):
                try:
                    want = _eval(expr, sizes)
                except KeyError as e:
                    raise ShapeError("size symbol %s of input `%s` is bound by no input" % (e, spec.name)) from None
                if n != want:
                    why = (
                        "%s = %s (from %s)" % (expr[1], want, origin[expr[1]])
                        if expr[0] == "sym"
                        else "%s = %s" % (_expr_text(expr), want)
                    )
                    raise ShapeError(
                        "input `%s` has shape %s: dimension %d is %s but %s; the fusion declares %s"
                        % (spec.name, list(t.shape), axis, n, why, spec.declared())
                    )
        missing = [s for s in self.symbols if s not in sizes]
        if missing:
            raise ShapeError("size symbol%s %s bound by no input" % ("s" if len(missing) > 1 else "", ", ".join(missing)))
        if not symbolic:
            for s, n in sizes.items():
                if n < 1:
                    raise ShapeError("%s = %d (from %s): every size must be at least 1" % (s, n, origin[s]))
        return sizes

    def _scalar_values(self, scalars):
        unknown = sorted(set(scalars) - {s.name for s in self.scalars})
        if unknown:
            raise TypeError(
                "kernel `%s` has no scalar input %s (its scalars: %s)"
                % (self.name, ", ".join("`%s`" % u for u in unknown), ", ".join(s.name for s in self.scalars) or "none")
            )
        values = {}
        for s in self.scalars:
            if s.name in scalars:
                v = scalars[s.name]
            elif s.name in self._scalar_defaults:
                v = self._scalar_defaults[s.name]
            else:
                raise TypeError("kernel `%s` needs the scalar keyword argument `%s` (%s)" % (self.name, s.name, s.dtype))
            if hasattr(v, "item") and not isinstance(v, (int, float)):
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError("scalar `%s` (%s) must be a number, not %s" % (s.name, s.dtype, type(v).__name__))
            if s.name in self._used_scalars:
                values[s.name] = float(v)
        return values

    def _check_placement(self, tensors):
        device = None
        for spec, t in zip(self.inputs, tensors):
            if t.device.type != "cuda":
                raise ValueError("input `%s` is on %s; hopfuse kernels run on CUDA tensors" % (spec.name, t.device))
            if device is None:
                device = t.device
            elif t.device != device:
                raise ValueError("input `%s` is on %s, input `%s` on %s" % (spec.name, t.device, self.inputs[0].name, device))
            if not t.is_contiguous():
                raise ShapeError(
                    "input `%s` is not contiguous (strides %s): hopfuse kernels read dense row-major "
                    "tensors; pass %s.contiguous()" % (spec.name, list(t.stride()), spec.name)
                )
            if t.data_ptr() % _ALIGNMENT:
                raise ValueError(
                    "input `%s` is at address %#x, not a multiple of %d bytes (a view at an offset?): "
                    "pass %s.clone()" % (spec.name, t.data_ptr(), _ALIGNMENT, spec.name)
                )
        return device

    # -- specializations
    def specialize(self, sizes, index=None):
        """The program compiled for `sizes` (a dict of every size symbol): its `.cuda`,
        `.plan_json`, `.index_type`, `.launch_dims`, `.tensors` and `.cubin()`. A fusion run as
        several kernels has one per segment: specialize those (`kernel.segments`)."""
        if self.segments is not None:
            raise ValueError(
                "kernel `%s` runs as %d kernels (%s): specialize each of its `segments`"
                % (self.name, len(self.segments), self.segmented_because)
            )
        return self._specialization(sizes, index)[0]

    def _specialization(self, sizes, index=None):
        key = tuple(sizes[s] for s in self.symbols) + (index,)
        found = self._specializations.get(key)
        if found is None:
            spec = self._program.specialize({s: int(sizes[s]) for s in self.symbols}, index)
            torch = _torch()
            position = {i.name: n for n, i in enumerate(self.inputs)}
            # (role, dtype, shape, the argument's position for an input): an input the kernel
            # does not read is no parameter, so inputs are found by name.
            buffers = [
                (role, getattr(torch, _TORCH_DTYPES[d]), tuple(shape), position.get(name))
                for name, role, d, shape in spec.tensors
            ]
            found = self._specializations[key] = (spec, buffers)
        return found

    def cuda(self, **sizes):
        """The CUDA source for these sizes (`kernel.cuda(M=4096, N=4096)`); of a fusion run as
        several kernels, each kernel's in the order they run, under a line naming it."""
        if self.segments is None:
            return self.specialize(sizes).cuda
        n = len(self.segments)
        return "".join(
            "// ==== kernel %d of %d: %s\n%s" % (i + 1, n, k.name, k.cuda(**{s: sizes[s] for s in k.symbols}))
            for i, k in enumerate(self.segments)
        )

    # -- calls
    def _prepare(self, tensors):
        """A `_Call` for these inputs' shapes, dtypes and devices, after the full checks (which
        raise, naming the tensor and the rule)."""
        torch = _torch()
        sizes = self._bind(tensors)
        device = self._check_placement(tensors)
        spec, buffers = self._specialization(sizes)
        index = device.index if device.index is not None else torch.cuda.current_device()
        allocated, address_of = _launch_layout(buffers, len(self.inputs))
        outputs = [b for b in allocated if b[0] == "output"]
        launcher = spec.launcher(index, address_of, len(self.inputs) + len(allocated))
        call = _Call()
        call.launch = launcher.launch
        call.stream = _raw_stream(torch)
        call.index = index
        call.device = device
        call.allocations = tuple(
            (torch.zeros if role == "workspace" else torch.empty, shape, dtype) for role, dtype, shape, _ in allocated
        )
        call.inputs = len(self.inputs)
        call.outputs = len(outputs)
        call.scalar_names = tuple(launcher.scalars)
        defaults = self._scalar_defaults
        call.defaults = (
            [float(defaults[n]) for n in call.scalar_names] if all(n in defaults for n in call.scalar_names) else None
        )
        call.bind()
        return call

    def __call__(self, *tensors, **scalars):
        if self.segments is not None:
            return self._call_segments(tensors, scalars)
        return self._call(*tensors, **scalars)

    def _call_segments(self, tensors, scalars):
        """A fusion run as several kernels: the inputs and scalars checked as the whole fusion's
        (naming the user's tensors), then each segment's kernel called in order on the fusion's
        inputs and the intermediates the earlier ones wrote (allocated by the kernel that writes
        them, as any output is), on torch's current stream; the final outputs returned."""
        self._bind(tensors)
        self._check_placement(tensors)
        given = self._scalar_values(scalars)
        values = {i.name: t for i, t in zip(self.inputs, tensors)}
        for kernel in self.segments:
            outs = kernel(
                *[values[i.name] for i in kernel.inputs],
                **{s.name: given[s.name] for s in kernel.scalars if s.name in given},
            )
            values.update(zip((o.name for o in kernel.outputs), outs if len(kernel.outputs) > 1 else (outs,)))
        outs = [values[o.name] for o in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _first_call(self, tensors, scalars):
        """A call whose inputs' shapes, dtypes and devices are new (or that is wrong): checked in
        full, remembered, then made again as a repeated call."""
        call = self._prepare(tensors)  # raises for a wrong argument, naming it and the rule
        self._calls[tuple(map(_SIGNATURE, tensors))] = call
        return self._call(*tensors, **scalars)

    def _ordered_scalars(self, call, scalars):
        """The scalars' values in `call`'s launcher order: those given, else the program's (a
        missing, unknown or non-numeric scalar raises)."""
        given = self._scalar_values(scalars)
        return [given[n] for n in call.scalar_names]

    def fake(self, *tensors, **scalars):
        """What a call returns, without a GPU: empty outputs of the right dtypes and shapes on
        the inputs' device (the fake implementation of `torch_op`; the shapes may be symbolic)."""
        torch = _torch()
        sizes = self._bind(tensors, symbolic=True)
        self._scalar_values(scalars)
        device = tensors[0].device if tensors else None
        outs = [
            torch.empty(
                tuple(_eval(e, sizes) for e in o.dims), dtype=getattr(torch, _TORCH_DTYPES[o.dtype]), device=device
            )
            for o in self.outputs
        ]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _schema_scalar(self, s):
        # A value the program gives is the argument's default (`float eps=1e-06`).
        text = "%s %s" % (_SCHEMA_SCALARS[s.dtype], s.name)
        if s.name in self._scalar_defaults:
            v = self._scalar_defaults[s.name]
            kind = _SCHEMA_SCALARS[s.dtype]
            text += "=%r" % (int(v) if kind == "int" else bool(v) if kind == "bool" else float(v))
        return text

    def schema(self):
        """The custom op schema: `(Tensor a, Tensor b, *, float eps) -> Tensor`."""
        args = ["Tensor %s" % i.name for i in self.inputs]
        if self.scalars:
            args.append("*")
            args += [self._schema_scalar(s) for s in self.scalars]
        ret = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join("Tensor" for _ in self.outputs) + ")"
        return "(%s) -> %s" % (", ".join(args), ret)


def _with_schedule(program, schedule):
    if schedule is None:
        return program
    if not isinstance(schedule, str):
        raise TypeError('schedule must be "auto", the text of a schedule block or None, not %s' % type(schedule).__name__)
    import re

    has_block = re.search(r"^\s*schedule\s*\{", program, re.M)
    if schedule == "auto":
        # A program without a schedule block compiles with its automatic schedule.
        if has_block:
            raise ValueError('schedule="auto" is for a program without a schedule block; remove the block')
        return program
    if has_block:
        raise ValueError("the program already has a schedule block; pass schedule=None or remove the block")
    body = schedule.strip()
    if not re.match(r"schedule\s*\{", body):
        body = "schedule {\n" + body + "\n}"
    return program.rstrip("\n") + "\n" + body + "\n"


def compile(program, schedule=None):  # noqa: A001 (the package's verb)
    """A `Kernel` for `program` (the text of a `.hf` file: a fusion, with or without its
    schedule block). `schedule` is the text of a schedule block (with or without the
    `schedule { }` around it) for a program that has none, or "auto" for the automatic schedule
    chosen for each call's sizes; None keeps the program's own (a program without one gets the
    automatic schedule too). Raises `CompileError` with each problem's line and column."""
    if not isinstance(program, str):
        raise TypeError("program must be the program text (a str), not %s" % type(program).__name__)
    return Kernel(Program(_with_schedule(program, schedule)))


def torch_op(name, program, schedule=None):
    """Registers the kernel as the custom op `name` ("namespace::op_name") with
    `torch.library.custom_op` (device "cuda") and a fake implementation computing the outputs'
    shapes from the inputs' (so `torch.compile` traces through it). `program` is program text
    or a `Kernel`. Returns the op: call it like the kernel."""
    torch = _torch()
    kernel = program if isinstance(program, Kernel) else compile(program, schedule)
    if not isinstance(name, str) or name.count("::") != 1:
        raise ValueError('a custom op name is "namespace::op_name", not %r' % (name,))

    def run(*tensors, **scalars):
        return kernel(*tensors, **scalars)

    def fake(*tensors, **scalars):
        return kernel.fake(*tensors, **scalars)

    op = torch.library.custom_op(name, run, mutates_args=(), device_types="cuda", schema=kernel.schema())
    op.register_fake(fake)
    return op
