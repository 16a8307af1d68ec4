"""A pure-Python stand-in for the part of PyTorch that torch twins and peers.py use.

For tests on machines without torch (CI): `PYTHONPATH=runner/peers/fake_torch` makes
`import torch` load this module. Values are Python floats (float64) rounded to the tensor's
dtype after every op (f32 through `struct`, bf16 by round-to-nearest-even of the f32 bits,
f16 through `struct`'s IEEE half, float8_e4m3fn / float8_e5m2 to nearest even through f32 (NaN /
an infinity beyond their range, as torch), integers truncated and wrapped), so a twin that forgets a
conversion or takes a wrong axis gives a different result. Stricter than torch on purpose:
an op on two tensors of different dtypes is an error (the twins convert explicitly), and so is
an operand shape that does not broadcast.

Not a GPU: `cuda.Event` times with `time.perf_counter`, `compile` returns the function. A
tensor has a `device` (cpu unless made with `device=` or `.cuda()`; results of ops are on cpu:
devices are not tracked through ops), a made-up 256-byte aligned `data_ptr()` that nothing
reads through (no kernel runs here: hopfuse's launch fails without a driver), and strides:
contiguous, except after `t()`, `transpose` and `permute`, whose results (copies here, their
values in logical order) report the view's strides as torch does, until `contiguous()`
(`_scaled_mm` checks its scales' layouts by them). `library.custom_op` registers a function and its fake implementation and calls the
function (there is no fake-tensor mode). `nn.attention.flex_attention` calls a score_mod on each
score and evaluates a mask_mod when its block mask is made, as torch does (a block mask made
for other tensors keeps their mask).
"""

import math
import struct
import sys as _sys
import time

__version__ = "0.0-fake"


class dtype:
    def __init__(self, name, itemsize, is_floating_point, fmt):
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point
        self.fmt = fmt

    def __repr__(self):
        return "torch." + self.name


float32 = dtype("float32", 4, True, "<f")
float64 = dtype("float64", 8, True, "<d")
float16 = dtype("float16", 2, True, "<e")
bfloat16 = dtype("bfloat16", 2, True, None)
int32 = dtype("int32", 4, False, "<i")
uint8 = dtype("uint8", 1, False, "<B")
int8 = dtype("int8", 1, False, "<b")
int64 = dtype("int64", 8, False, "<q")
float8_e4m3fn = dtype("float8_e4m3fn", 1, True, None)
float8_e5m2 = dtype("float8_e5m2", 1, True, None)
# (mantissa bits, exponent of the smallest normal, largest finite, what a larger value becomes)
_FP8 = {"float8_e4m3fn": (3, -6, 448.0, math.nan), "float8_e5m2": (2, -14, 57344.0, math.inf)}
bool = dtype("bool", 1, False, "<?")  # noqa: A001 (torch's name)
float = float32  # noqa: A001
half = float16
double = float64

_builtin_float = 0.0.__class__


def _f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _round(v, dt):
    if dt is float64:
        return _builtin_float(v)
    if dt is int32:
        if isinstance(v, _builtin_float) and not math.isfinite(v):
            return 0
        i = int(v) & 0xFFFFFFFF
        return i - (1 << 32) if i >= (1 << 31) else i
    if dt is bool:
        return 1 if v else 0
    if dt is uint8:
        return int(v) & 0xFF
    if dt is int8:
        i = int(v) & 0xFF
        return i - 256 if i >= 128 else i
    if dt is int64:
        i = int(v) & 0xFFFFFFFFFFFFFFFF
        return i - (1 << 64) if i >= (1 << 63) else i
    if dt.name in _FP8:
        return _round_fp8(v, dt)
    v = _builtin_float(v)
    if not math.isfinite(v):
        return v
    try:
        if dt is float16:
            return struct.unpack("<e", struct.pack("<e", v))[0]
        f = struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)
    if dt is float32:
        return f
    # bfloat16: keep 8 significant bits of the f32, ties to even.
    bits = _f32_bits(f)
    lsb = (bits >> 16) & 1
    bits = ((bits + 0x7FFF + lsb) & 0xFFFF0000) & 0xFFFFFFFF
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _round_fp8(v, dt):
    mantissa, min_exp, largest, overflow = _FP8[dt.name]
    v = _round(v, float32)
    if math.isnan(v) or v == 0:
        return v
    if math.isinf(v):
        return math.copysign(overflow, v)
    exp = max(math.frexp(math.fabs(v))[1] - 1, min_exp)
    ulp = math.ldexp(1.0, exp - mantissa)
    r = round(math.fabs(v) / ulp) * ulp  # Python's round: to nearest even
    return math.copysign(overflow if r > largest else r, v)


def _fp8_byte(v, dt):
    """The byte of an 8-bit float value (already rounded)."""
    mantissa, min_exp, _, _ = _FP8[dt.name]
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    if math.isnan(v):
        return sign | 0x7F
    if math.isinf(v):
        return sign | ((0x7F >> mantissa) << mantissa)
    a = math.fabs(v)
    if a == 0:
        return sign
    exp = math.frexp(a)[1] - 1
    if exp < min_exp:
        return sign | int(a / math.ldexp(1.0, min_exp - mantissa))
    m = int((a / math.ldexp(1.0, exp) - 1) * (1 << mantissa))
    return sign | ((exp + 1 - min_exp) << mantissa) | m


def _fp8_value(b, dt):
    mantissa, min_exp, _, _ = _FP8[dt.name]
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b & 0x7F) >> mantissa, b & ((1 << mantissa) - 1)
    top = 0x7F >> mantissa
    if dt is float8_e4m3fn and b & 0x7F == 0x7F:
        return math.nan
    if dt is float8_e5m2 and e == top:
        return math.nan if m else sign * math.inf
    if e == 0:
        return sign * math.ldexp(m, min_exp - mantissa)
    return sign * math.ldexp(1.0 + m / (1 << mantissa), e - 1 + min_exp)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _strides(shape):
    st, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        st[k] = acc
        acc *= shape[k]
    return st


def _indices(shape):
    idx = [0] * len(shape)
    for _ in range(_numel(shape)):
        yield tuple(idx)
        for k in range(len(shape) - 1, -1, -1):
            idx[k] += 1
            if idx[k] < shape[k]:
                break
            idx[k] = 0


class Size(tuple):
    pass


class device:  # noqa: N801 (torch's name)
    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        kind, _, number = str(spec).partition(":")
        if kind not in ("cpu", "cuda", "meta"):
            raise RuntimeError("fake torch: unknown device %r" % (spec,))
        self.type = kind
        self.index = int(number) if number else index
        if kind == "cuda" and self.index is None:
            self.index = 0

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __repr__(self):
        return "device(type=%r%s)" % (self.type, "" if self.index is None else ", index=%d" % self.index)


_CPU = device("cpu")
# Made-up device addresses, one 256-byte aligned block per tensor: nothing reads through them.
_next_address = [0x7F0000000000]


def _address(nbytes):
    a = _next_address[0]
    _next_address[0] += (nbytes + 255) // 256 * 256 + 256
    return a


class Tensor:
    def __init__(self, data, shape, dt):
        assert len(data) == _numel(shape), (len(data), shape)
        self._data = [_round(v, dt) for v in data]
        self.shape = Size(shape)
        self.dtype = dt
        self.device = _CPU
        self._address = _address(len(data) * dt.itemsize)
        # The strides of the view this copy stands for (None: contiguous).
        self._view_strides = None
        # torch's counter of in-place writes (FlexAttention twins key block masks by it).
        self._version = 0

    def _on(self, where):
        t = Tensor(self._data, self.shape, self.dtype)
        t.device = device(where)
        return t

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def data_ptr(self):
        return self._address

    def get_device(self):
        return self.device.index if self.device.type == "cuda" else -1

    def stride(self, dim=None):
        st = self._view_strides or tuple(_strides(self.shape))
        return st if dim is None else st[dim]

    def is_contiguous(self):
        # As torch: axes of extent 1 have any stride (this module's `all` is torch's).
        for n, a, b in zip(self.shape, self.stride(), _strides(self.shape)):
            if n != 1 and a != b:
                return False
        return True

    def element_size(self):
        return self.dtype.itemsize

    # -- inspection
    def dim(self):
        return len(self.shape)

    def numel(self):
        return len(self._data)

    def tolist(self):
        assert self.dim() <= 1, "fake torch: tolist of 0-D or 1-D tensors only"
        return list(self._data) if self.dim() else self._data[0]

    def item(self):
        assert self.numel() == 1
        return self._data[0]

    def _at(self, idx):
        off = 0
        for i, s in zip(idx, _strides(self.shape)):
            off += i * s
        return self._data[off]

    # -- conversions and views (copies here)
    def to(self, *args, **kwargs):
        dt = kwargs.get("dtype")
        for a in args:
            if isinstance(a, dtype):
                dt = a
        return self if dt is None or dt is self.dtype else Tensor(self._data, self.shape, dt)

    def float(self):
        return self.to(float32)

    def double(self):
        return self.to(float64)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def int(self):
        return self.to(int32)

    def long(self):
        return self.to(int64)

    def char(self):
        return self.to(int8)

    def byte(self):
        return self.to(uint8)

    def cuda(self):
        return self._on("cuda")

    def cpu(self):
        return self._on("cpu")

    def detach(self):
        return self

    def contiguous(self):
        return self if self.is_contiguous() else Tensor(self._data, self.shape, self.dtype)

    def zero_(self):
        self._data = [_round(0, self.dtype)] * len(self._data)
        self._version += 1
        return self

    def copy_(self, src):
        assert src.shape == self.shape and src.dtype is self.dtype, "copy_: shape or dtype differs"
        self._data = list(src._data)
        self._version += 1
        return self

    def clone(self):
        return Tensor(self._data, self.shape, self.dtype)

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if -1 in shape:
            known = _numel([s for s in shape if s != -1])
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        return Tensor(self._data, shape, self.dtype)

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], dtype):
            assert args[0] is uint8, "fake torch: view as bytes only"
            raw = to_bytes(self)
            return Tensor(list(raw), (len(raw),), uint8)
        return self.reshape(*args)

    def unsqueeze(self, d):
        if d < 0:
            d += self.dim() + 1
        assert 0 <= d <= self.dim(), "unsqueeze: dim out of range"
        return Tensor(self._data, self.shape[:d] + (1,) + self.shape[d:], self.dtype)

    def squeeze(self, dims):
        dims = (dims,) if isinstance(dims, type(0)) else tuple(dims)
        for d in dims:
            assert self.shape[d] == 1, "squeeze of an axis that is not 1"
        return Tensor(self._data, tuple(s for k, s in enumerate(self.shape) if k not in dims), self.dtype)

    def t(self):
        assert self.dim() == 2, "t() of a tensor that is not 2-D"
        return self.transpose(0, 1)

    def transpose(self, d0, d1):
        d0, d1 = (d + self.dim() if d < 0 else d for d in (d0, d1))
        assert 0 <= d0 < self.dim() and 0 <= d1 < self.dim(), "transpose: dim out of range"
        perm = list(range(self.dim()))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self.permute(*perm)

    def permute(self, *perm):
        assert sorted(perm) == list(range(self.dim())), "permute: not a permutation"
        shape = tuple(self.shape[k] for k in perm)
        data = [self._at(tuple(idx[perm.index(k)] for k in range(self.dim()))) for idx in _indices(shape)]
        view = Tensor(data, shape, self.dtype)
        strides = self.stride()
        view._view_strides = tuple(strides[k] for k in perm)
        return view

    def expand(self, *sizes):
        """Only axes of extent 1 grow (-1 keeps an axis), as torch's."""
        assert len(sizes) == self.dim(), "expand: one size per axis"
        shape = tuple(s if n == -1 else n for s, n in zip(self.shape, sizes))
        for s, n in zip(self.shape, shape):
            assert s == n or s == 1, "expand: only an axis of extent 1 expands"
        data = [self._at(tuple(i if s > 1 else 0 for i, s in zip(idx, self.shape))) for idx in _indices(shape)]
        return Tensor(data, shape, self.dtype)

    def repeat_interleave(self, repeats, dim):
        """An integer count of repeats along one axis (each element `repeats` times in a row)."""
        assert isinstance(repeats, int) and repeats >= 1, "repeat_interleave: an integer count"
        shape = tuple(n * repeats if d == dim else n for d, n in enumerate(self.shape))
        data = [self._at(tuple(i // repeats if d == dim else i for d, i in enumerate(idx))) for idx in _indices(shape)]
        return Tensor(data, shape, self.dtype)

    def __getitem__(self, key):
        """Basic indexing only, as the twins write it: a tuple of slices and integers (Python
        ints, or 0-dim integer tensors: a FlexAttention score_mod's `x[h, q_idx]`), and a
        trailing `...`; an integer drops its axis."""
        key = key if isinstance(key, tuple) else (key,)
        if key and key[-1] is Ellipsis:
            key = key[:-1]
        assert len(key) <= self.dim(), "fake torch: more indices than axes"
        key = tuple(_basic_index(k) for k in key) + (slice(None),) * (self.dim() - len(key))
        ranges = []
        for k, n in zip(key, self.shape):
            if isinstance(k, slice):
                ranges.append(range(*k.indices(n)))
                continue
            if not -n <= k < n:
                raise IndexError("index %d is out of bounds for dimension with size %d" % (k, n))
            ranges.append(range(k % n, k % n + 1))
        shape = tuple(len(r) for r, k in zip(ranges, key) if isinstance(k, slice))
        full = tuple(len(r) for r in ranges)
        data = [self._at(tuple(r[i] for r, i in zip(ranges, idx))) for idx in _indices(full)]
        return Tensor(data, shape, self.dtype)

    # -- arithmetic
    def _binary(self, other, f, reverse=False):
        a, b = (other, self) if reverse else (self, other)
        return _elementwise(f, a, b)

    def __add__(self, o):
        return self._binary(o, lambda x, y: x + y)

    def __radd__(self, o):
        return self._binary(o, lambda x, y: x + y, True)

    def __sub__(self, o):
        return self._binary(o, lambda x, y: x - y)

    def __rsub__(self, o):
        return self._binary(o, lambda x, y: x - y, True)

    def __mul__(self, o):
        return self._binary(o, lambda x, y: x * y)

    def __rmul__(self, o):
        return self._binary(o, lambda x, y: x * y, True)

    def __truediv__(self, o):
        return self._binary(o, _div)

    def __rtruediv__(self, o):
        return self._binary(o, _div, True)

    def __neg__(self):
        return _unary(lambda x: -x, self)

    def __mod__(self, o):
        return self._binary(o, _remainder)

    def __rmod__(self, o):
        return self._binary(o, _remainder, True)

    # Bitwise ops on integer tensors (Python ints, wrapped to the dtype after): the twins'
    # random-number generator (`_hf_philox`).
    def _bitwise(self, o, f, reverse=False):
        for t in (self, o):
            if isinstance(t, Tensor) and t.dtype.is_floating_point:
                raise TypeError("fake torch: a bitwise op on %r" % t.dtype)
        return self._binary(o, f, reverse)

    def __and__(self, o):
        return self._bitwise(o, lambda x, y: x & y)

    def __rand__(self, o):
        return self._bitwise(o, lambda x, y: x & y, True)

    def __or__(self, o):
        return self._bitwise(o, lambda x, y: x | y)

    def __xor__(self, o):
        return self._bitwise(o, lambda x, y: x ^ y)

    def __rshift__(self, o):
        return self._bitwise(o, lambda x, y: x >> y)

    # Comparisons give bool tensors, as torch's do.
    def __lt__(self, o):
        return _compare(lambda x, y: x < y, self, o)

    def __le__(self, o):
        return _compare(lambda x, y: x <= y, self, o)

    def __gt__(self, o):
        return _compare(lambda x, y: x > y, self, o)

    def __ge__(self, o):
        return _compare(lambda x, y: x >= y, self, o)

    def __eq__(self, o):
        return _compare(lambda x, y: x == y, self, o)

    def __ne__(self, o):
        return _compare(lambda x, y: x != y, self, o)

    __hash__ = object.__hash__

    def bool(self):
        return self.to(bool)

    def __matmul__(self, o):
        return matmul(self, o)

    def clamp_min(self, v):
        return _elementwise(lambda x, y: x if x >= y else y, self, v)

    def clamp_max(self, v):
        return _elementwise(lambda x, y: x if x <= y else y, self, v)

    def sum(self, dim, dtype=None):
        return sum(self, dim=dim, dtype=dtype)


def _basic_index(k):
    """A slice, or an integer index from a Python int or a 0-dim integer tensor."""
    if isinstance(k, slice):
        return k
    if isinstance(k, Tensor):
        if k.dim() != 0 or k.dtype.is_floating_point or k.dtype is bool:
            raise IndexError("fake torch: a tensor index is a 0-dim integer here, not %r%r" % (k.dtype, tuple(k.shape)))
        return int(k._data[0])
    if type(k) is type(0):
        return k
    raise IndexError("fake torch: slices and integers only, not %r" % (k,))


def _div(x, y):
    if y == 0:
        return math.nan if x == 0 or x != x else math.copysign(math.inf, x) * math.copysign(1, y)
    return x / y


def _remainder(x, y):
    r = math.fmod(x, y)
    return r + y if r != 0 and (r < 0) != (y < 0) else r


def _compare(f, a, b):
    t = _elementwise(f, a, b)
    return Tensor(t._data, t.shape, bool)


def _result_dtype(a, b):
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb:
        if a.dtype is not b.dtype:
            raise TypeError("fake torch: an op on %r and %r (a twin converts explicitly)" % (a.dtype, b.dtype))
        return a.dtype
    t, s = (a, b) if ta else (b, a)
    if not t.dtype.is_floating_point and isinstance(s, _builtin_float):
        return float32
    return t.dtype


def _broadcast(sa, sb):
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + tuple(sa), (1,) * (n - len(sb)) + tuple(sb)
    out = []
    for x, y in zip(sa, sb):
        if x != y and 1 not in (x, y):
            raise ValueError("fake torch: shapes %r and %r do not broadcast" % (sa, sb))
        out.append(max(x, y))
    return tuple(out)


def _elementwise(f, a, b):
    dt = _result_dtype(a, b)
    if not isinstance(a, Tensor):
        return Tensor([f(a, y) for y in b._data], b.shape, dt)
    if not isinstance(b, Tensor):
        return Tensor([f(x, b) for x in a._data], a.shape, dt)
    shape = _broadcast(a.shape, b.shape)

    def reader(t):
        pad = (1,) * (len(shape) - t.dim()) + tuple(t.shape)
        st = _strides(pad)
        st = [0 if pad[k] == 1 else st[k] for k in range(len(pad))]
        return lambda idx: t._data[sum_(i * s for i, s in zip(idx, st))]

    ra, rb = reader(a), reader(b)
    return Tensor([f(ra(i), rb(i)) for i in _indices(shape)], shape, dt)


sum_ = __builtins__["sum"] if isinstance(__builtins__, dict) else __builtins__.sum
max_ = __builtins__["max"] if isinstance(__builtins__, dict) else __builtins__.max
any_ = __builtins__["any"] if isinstance(__builtins__, dict) else __builtins__.any
all_ = __builtins__["all"] if isinstance(__builtins__, dict) else __builtins__.all


def _unary(f, x):
    return Tensor([f(v) for v in x._data], x.shape, x.dtype)


def _float_unary(f):
    def op(x):
        if not x.dtype.is_floating_point:
            raise TypeError("fake torch: a float op on %r" % x.dtype)
        return _unary(f, x)

    return op


def _safe_exp(v):
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


exp = _float_unary(_safe_exp)
sqrt = _float_unary(lambda v: math.sqrt(v) if v >= 0 else math.nan)
rsqrt = _float_unary(lambda v: (1 / math.sqrt(v) if v > 0 else (math.inf if v == 0 else math.nan)))
tanh = _float_unary(math.tanh)
sigmoid = _float_unary(lambda v: 1 / (1 + _safe_exp(-v)))


log = _float_unary(lambda v: math.log(v) if v > 0 else (-math.inf if v == 0 else math.nan))
log1p = _float_unary(lambda v: math.log1p(v) if v > -1 else (-math.inf if v == -1 else math.nan))
erf = _float_unary(math.erf)
cos = _float_unary(math.cos)
sin = _float_unary(math.sin)


def clamp(x, lo, hi):
    """Numbers as bounds (what the twins pass); NaN in x stays NaN."""
    return _unary(lambda v: v if v != v else min(max(v, lo), hi), x)


def where(c, a, b):
    if c.dtype is not bool:
        raise TypeError("fake torch: where's condition is %r, not bool" % c.dtype)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("fake torch: where of two numbers")
    # Each value broadcast to the values' common shape and converted to their dtype.
    av = _elementwise(lambda x, y: x, a, b)
    bv = _elementwise(lambda x, y: y, a, b)
    if tuple(_broadcast(c.shape, av.shape)) != tuple(av.shape):
        raise ValueError("fake torch: where's condition broadcasts the values")
    if tuple(c.shape) != tuple(av.shape):
        # The condition broadcast to the values' shape (leading axes of 1 added first).
        c = c.reshape((1,) * (av.dim() - c.dim()) + tuple(c.shape)).expand(*av.shape)
    return Tensor([x if k else y for k, x, y in zip(c._data, av._data, bv._data)], av.shape, av.dtype)


class _Functional:
    @staticmethod
    def pad(x, pad, value=0.0):
        """torch.nn.functional.pad, constant mode: (before, after) pairs from the last axis."""
        assert len(pad) % 2 == 0 and len(pad) // 2 <= x.dim(), "pad: pairs, at most one per axis"
        widths = [(0, 0)] * (x.dim() - len(pad) // 2) + [(pad[2 * k], pad[2 * k + 1]) for k in reversed(range(len(pad) // 2))]
        assert not [w for w in widths if min(w) < 0], "fake torch: padding widths >= 0 only"
        shape = tuple(n + b + a for n, (b, a) in zip(x.shape, widths))

        def at(idx):
            src = tuple(i - b for i, (b, _) in zip(idx, widths))
            inside = not [i for i, n in zip(src, x.shape) if not 0 <= i < n]
            return x._at(src) if inside else value

        return Tensor([at(idx) for idx in _indices(shape)], shape, x.dtype)

    @staticmethod
    def gelu(x, approximate="none"):
        if approximate == "tanh":
            return _float_unary(_gelu_tanh)(x)
        return _float_unary(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x)

    @staticmethod
    def softplus(x):
        return _float_unary(lambda v: v if v > 20 else math.log1p(_safe_exp(v)))(x)

    @staticmethod
    def silu(x):
        return _float_unary(lambda v: v / (1 + _safe_exp(-v)))(x)


    @staticmethod
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        """softmax(q k^T * scale) v over `[..., L, E]`, `[..., S, E]`, `[..., S, Ev]` in float64,
        rounded once to q's dtype; `is_causal` keeps key j for query i when j <= i (torch's
        top-left alignment when L != S). `enable_gqa`: k and v have Hkv heads (axis -3) where q
        has Hq, a multiple; query head h reads K/V head h // (Hq / Hkv), as torch's
        repeat_interleave. Masks and dropout are not modelled."""
        assert attn_mask is None and dropout_p == 0.0, "fake torch: plain or causal SDPA only"
        if not (query.dtype is key.dtype is value.dtype) or not query.dtype.is_floating_point:
            raise TypeError("fake torch: SDPA of %r, %r, %r" % (query.dtype, key.dtype, value.dtype))
        batch = tuple(query.shape[:-2])
        kv_batch = tuple(key.shape[:-2])
        shapes = (tuple(query.shape), tuple(key.shape), tuple(value.shape))
        if query.dim() < 2 or tuple(value.shape[:-2]) != kv_batch:
            raise ValueError("fake torch: SDPA of shapes %r, %r, %r" % shapes)
        heads = _gqa_heads(batch, kv_batch, enable_gqa, shapes)
        (nl, ne), (ns, ne2), (ns2, nv) = query.shape[-2:], key.shape[-2:], value.shape[-2:]
        assert ne == ne2 and ns == ns2, "fake torch: SDPA's q, k, v sizes differ"
        scale = 1.0 / math.sqrt(ne) if scale is None else scale
        out = []
        for b in range(_numel(batch)):
            kb = _kv_head(b, heads)
            q = query._data[b * nl * ne : (b + 1) * nl * ne]
            k = key._data[kb * ns * ne : (kb + 1) * ns * ne]
            v = value._data[kb * ns * nv : (kb + 1) * ns * nv]
            for i in range(nl):
                s = [
                    -math.inf if is_causal and j > i else sum_(q[i * ne + e] * k[j * ne + e] for e in range(ne)) * scale
                    for j in range(ns)
                ]
                m = max_(s) if s else -math.inf
                w = [_safe_exp(x - m) if m != -math.inf else math.nan for x in s]
                total = sum_(w)
                for d in range(nv):
                    out.append(sum_(w[j] * v[j * nv + d] for j in range(ns)) / total if total else math.nan)
        return Tensor(out, batch + (nl, nv), query.dtype)


def _gqa_heads(batch, kv_batch, enable_gqa, shapes):
    """The (query heads, K/V heads) grouped-query attention pairs for `batch` (q's leading axes)
    and `kv_batch` (k's and v's), or None when they are equal. Without `enable_gqa` they must be
    equal; with it, they differ only in the heads axis (the last), q's a multiple of k's, as
    torch checks."""
    if kv_batch == batch:
        return None
    if not enable_gqa or not batch or len(kv_batch) != len(batch) or kv_batch[:-1] != batch[:-1] or batch[-1] % kv_batch[-1]:
        raise ValueError("fake torch: attention of shapes %r, %r, %r" % shapes)
    return (batch[-1], kv_batch[-1])


def _kv_head(b, heads):
    """The flat K/V batch index query batch index `b` reads (`heads` from `_gqa_heads`)."""
    if heads is None:
        return b
    hq, hk = heads
    return b // hq * hk + b % hq // (hq // hk)


class _SDPBackend:
    """torch.nn.attention.SDPBackend's members."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


class _SdpaKernel:
    """torch.nn.attention.sdpa_kernel: the backends allowed inside; here the math is one, so it
    only records them (`_Attention.active`) for tests that look."""

    def __init__(self, backends, set_priority=False):
        self.backends = list(backends) if isinstance(backends, (list, tuple)) else [backends]

    def __enter__(self):
        _Attention.active.append(self.backends)
        return self

    def __exit__(self, *exc):
        _Attention.active.pop()
        return False


def _index(i):
    """A FlexAttention index argument: a 0-dim int32 tensor."""
    return Tensor([i], (), int32)


class _BlockMask:
    """What `create_block_mask` returns: here the mask itself, evaluated when it is made, as
    torch's block mask is (one made for other tensors, or for another shape, is theirs)."""

    def __init__(self, keep, shape):
        self.keep = keep
        self.shape = shape

    def kept(self, b, h, i, j):
        nb, nh, nq, nk = self.shape
        return self.keep[((b % nb * nh + h % nh) * nq + i) * nk + j]


def _create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda", BLOCK_SIZE=128, _compile=False):
    """torch.nn.attention.flex_attention.create_block_mask: `mask_mod(b, h, q_idx, kv_idx)` (0-dim
    int32 tensors) for every element; B or H None is one for all (broadcast)."""
    shape = (B or 1, H or 1, Q_LEN, KV_LEN)
    keep = []
    for b, h, i, j in _indices(shape):
        r = mask_mod(_index(b), _index(h), _index(i), _index(j))
        if not isinstance(r, Tensor) or r.dim() != 0 or r.dtype is not bool:
            raise TypeError("fake torch: a mask_mod returns a 0-dim bool tensor, not %r" % (r,))
        keep.append(r._data[0] != 0)
    return _BlockMask(keep, shape)


def _flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False, kernel_options=None):
    """torch.nn.attention.flex_attention.flex_attention on `[B, H, L, E]`, `[B, H, S, E]`,
    `[B, H, S, Ev]`: each score `q k * scale` an f32 0-dim tensor given to `score_mod(score, b, h,
    q_idx, kv_idx)`, which returns one; the block mask's dropped scores -inf; the softmax and
    its product with v in float64, rounded once to q's dtype. A query with every key masked is
    0, as FlexAttention's (the fusion's is NaN). `enable_gqa`: k and v may have fewer heads, as
    SDPA's (`_gqa_heads`). The log-sum-exp is not modelled."""
    assert not return_lse and kernel_options is None, "fake torch: plain flex_attention only"
    if not (query.dtype is key.dtype is value.dtype) or not query.dtype.is_floating_point:
        raise TypeError("fake torch: flex_attention of %r, %r, %r" % (query.dtype, key.dtype, value.dtype))
    if not query.dim() == key.dim() == value.dim() == 4:
        raise ValueError("fake torch: flex_attention takes 4-D tensors, not %r" % (tuple(query.shape),))
    nb, nh, nl, ne = query.shape
    nhk, ns, nv = key.shape[1], key.shape[2], value.shape[3]
    shapes = (tuple(query.shape), tuple(key.shape), tuple(value.shape))
    if tuple(key.shape) != (nb, nhk, ns, ne) or tuple(value.shape) != (nb, nhk, ns, nv):
        raise ValueError("fake torch: flex_attention of shapes %r, %r, %r" % shapes)
    heads = _gqa_heads((nb, nh), (nb, nhk), enable_gqa, shapes)
    if block_mask is not None:
        bb, bh, bl, bs = block_mask.shape
        if (bl, bs) != (nl, ns) or bb not in (1, nb) or bh not in (1, nh):
            raise ValueError("block_mask was created for block_mask.shape=%r but got q_len=%d, kv_len=%d" % (block_mask.shape, nl, ns))
    scale = 1.0 / math.sqrt(ne) if scale is None else scale
    out = []
    for b, h, i in _indices((nb, nh, nl)):
        row = ((b * nh + h) * nl + i) * ne
        kv = _kv_head(b * nh + h, heads)
        s = []
        for j in range(ns):
            col = (kv * ns + j) * ne
            x = sum_(query._data[row + e] * key._data[col + e] for e in range(ne)) * scale
            if score_mod is not None:
                r = score_mod(Tensor([x], (), float32), _index(b), _index(h), _index(i), _index(j))
                if not isinstance(r, Tensor) or r.dim() != 0 or not r.dtype.is_floating_point:
                    raise TypeError("fake torch: a score_mod returns a 0-dim float tensor, not %r" % (r,))
                x = _round(r._data[0], float32)
            if block_mask is not None and not block_mask.kept(b, h, i, j):
                x = -math.inf
            s.append(x)
        m = max_(s) if s else -math.inf
        w = [0.0 if m == -math.inf else _safe_exp(x - m) for x in s]
        total = sum_(w)
        base = kv * ns * nv
        for d in range(nv):
            out.append(sum_(w[j] * value._data[base + j * nv + d] for j in range(ns)) / total if total else 0.0)
    return Tensor(out, (nb, nh, nl, nv), query.dtype)


class _FlexAttentionModule:
    """torch.nn.attention.flex_attention's members."""

    flex_attention = staticmethod(_flex_attention)
    create_block_mask = staticmethod(_create_block_mask)
    BlockMask = _BlockMask


class _Attention:
    SDPBackend = _SDPBackend
    sdpa_kernel = _SdpaKernel
    active = []
    flex_attention = _FlexAttentionModule()


class _Nn:
    functional = _Functional()
    attention = _Attention()


nn = _Nn()
# `from torch.nn.functional import ...`, `from torch.nn.attention import ...` and
# `from torch.nn.attention.flex_attention import ...`: this module is no package, so its
# submodules are registered as loaded.
_sys.modules[__name__ + ".nn"] = nn
_sys.modules[__name__ + ".nn.functional"] = nn.functional
_sys.modules[__name__ + ".nn.attention"] = nn.attention
_sys.modules[__name__ + ".nn.attention.flex_attention"] = nn.attention.flex_attention


def cat(tensors, dim=0):
    a, b = tensors
    assert a.dtype is b.dtype, "fake torch: cat of different dtypes"
    if dim < 0:
        dim += a.dim()
    # (`all` is this module's.)
    assert not [k for k, (n, m) in enumerate(zip(a.shape, b.shape)) if k != dim and n != m], "cat: shapes differ"
    shape = tuple(n + m if k == dim else n for k, (n, m) in enumerate(zip(a.shape, b.shape)))
    first = a.shape[dim]

    def at(idx):
        if idx[dim] < first:
            return a._at(idx)
        return b._at(tuple(i - first if k == dim else i for k, i in enumerate(idx)))

    return Tensor([at(idx) for idx in _indices(shape)], shape, a.dtype)


def _picked(j, n):
    j = int(j)
    if not 0 <= j < n:
        raise RuntimeError(f"index {j} is out of bounds for dimension with size {n}")
    return j


def gather(x, dim, index):
    if dim < 0:
        dim += x.dim()
    assert index.dtype is int64, "gather(): Expected dtype int64 for index"
    assert index.dim() == x.dim(), "gather(): index and input have different ranks"
    n = x.shape[dim]

    def at(idx):
        j = _picked(index._at(idx), n)
        return x._at(tuple(j if k == dim else i for k, i in enumerate(idx)))

    return Tensor([at(idx) for idx in _indices(index.shape)], index.shape, x.dtype)


def index_select(x, dim, index):
    if dim < 0:
        dim += x.dim()
    assert index.dtype in (int32, int64), "index_select(): Expected dtype int32/int64 for index"
    assert index.dim() == 1, "index_select(): Index is supposed to be a vector"
    n = x.shape[dim]
    shape = tuple(index.shape[0] if k == dim else s for k, s in enumerate(x.shape))

    def at(idx):
        j = _picked(index._data[idx[dim]], n)
        return x._at(tuple(j if k == dim else i for k, i in enumerate(idx)))

    return Tensor([at(idx) for idx in _indices(shape)], shape, x.dtype)


def relu(x):
    return _unary(lambda v: v if v > 0 else 0, x)


def abs(x):  # noqa: A001
    return _unary(lambda v: -v if v < 0 else v, x)


def maximum(a, b):
    return _elementwise(lambda x, y: x if x >= y else y, a, b)


def minimum(a, b):
    return _elementwise(lambda x, y: x if x <= y else y, a, b)


def logical_and(a, b):
    return _compare(lambda x, y: x != 0 and y != 0, a, b)


def logical_or(a, b):
    return _compare(lambda x, y: x != 0 or y != 0, a, b)


def logical_xor(a, b):
    return _compare(lambda x, y: (x != 0) != (y != 0), a, b)


def logical_not(a):
    return _compare(lambda x, y: x == 0, a, a)


def _reduce(x, dim, combine, dt):
    dims = (dim,) if isinstance(dim, type(0)) else tuple(dim)
    dims = tuple(d + x.dim() if d < 0 else d for d in dims)
    kept = [k for k in range(x.dim()) if k not in dims]
    out_shape = tuple(x.shape[k] for k in kept)
    acc = {}
    for idx, v in zip(_indices(x.shape), x._data):
        key = tuple(idx[k] for k in kept)
        acc[key] = v if key not in acc else combine(acc[key], v)
    return Tensor([acc[k] for k in _indices(out_shape)], out_shape, dt)


def sum(x, dim, dtype=None):  # noqa: A001
    dt = dtype or (x.dtype if x.dtype.is_floating_point else None)
    if dt is None:
        dt = int32  # torch would give int64; the twins always pass dtype= for integers
    return _reduce(x, dim, lambda p, q: p + q, dt)


def amax(x, dim):
    return _reduce(x, dim, lambda p, q: p if p >= q else q, x.dtype)


def amin(x, dim):
    return _reduce(x, dim, lambda p, q: p if p <= q else q, x.dtype)


def _groups(x, dim):
    """The values of `x` by kept index (row-major over the kept axes), for reductions that
    need a row whole (two passes, a maximum first)."""
    dims = (dim,) if isinstance(dim, type(0)) else tuple(dim)
    dims = tuple(d + x.dim() if d < 0 else d for d in dims)
    kept = [k for k in range(x.dim()) if k not in dims]
    out_shape = tuple(x.shape[k] for k in kept)
    rows = {k: [] for k in _indices(out_shape)}
    for idx, v in zip(_indices(x.shape), x._data):
        rows[tuple(idx[k] for k in kept)].append(v)
    return [rows[k] for k in _indices(out_shape)], out_shape


def _float_reduction(x, what):
    if not x.dtype.is_floating_point:
        raise TypeError("fake torch: %s of %r (torch wants a float tensor or dtype=)" % (what, x.dtype))


def mean(x, dim, dtype=None):
    if dtype is None:
        _float_reduction(x, "mean")
    rows, shape = _groups(x, dim)
    return Tensor([sum_(r) / len(r) if r else math.nan for r in rows], shape, dtype or x.dtype)


def var(x, dim, correction=1):
    _float_reduction(x, "var")
    rows, shape = _groups(x, dim)

    def one(r):
        m = sum_(r) / len(r) if r else math.nan
        dof = max_(len(r) - correction, 0)
        ss = sum_((v - m) ** 2 for v in r)
        return ss / dof if dof > 0 else (math.inf if ss > 0 else math.nan)

    return Tensor([one(r) for r in rows], shape, x.dtype)


def var_mean(x, dim, correction=1):
    return var(x, dim, correction=correction), mean(x, dim)


def logsumexp(x, dim):
    _float_reduction(x, "logsumexp")
    rows, shape = _groups(x, dim)

    def one(r):
        m = max_(r) if r else -math.inf
        m = 0.0 if math.isinf(m) else m
        total = sum_(_safe_exp(v - m) for v in r)
        return (math.log(total) if total > 0 else -math.inf) + m

    return Tensor([one(r) for r in rows], shape, x.dtype)


def prod(x, dim, dtype=None):
    if not isinstance(dim, type(0)):
        raise TypeError("fake torch: prod takes one dim, as torch's")
    rows, shape = _groups(x, dim)

    def one(r):
        p = 1.0
        for v in r:
            p *= v
        return p

    return Tensor([one(r) for r in rows], shape, dtype or x.dtype)


def any(x, dim):  # noqa: A001
    rows, shape = _groups(x, dim)
    return Tensor([1 if any_(v != 0 for v in r) else 0 for r in rows], shape, bool)


def all(x, dim):  # noqa: A001
    rows, shape = _groups(x, dim)
    return Tensor([1 if all_(v != 0 for v in r) else 0 for r in rows], shape, bool)


def _arg(x, dim, better):
    if not isinstance(dim, type(0)):
        raise TypeError("fake torch: argmax/argmin take one dim, as torch's")
    rows, shape = _groups(x, dim)

    def one(r):
        if not r:
            raise IndexError("fake torch: argmax/argmin of an empty dimension")
        best = 0
        for i, v in enumerate(r):
            if r[best] != r[best]:
                break  # a NaN wins, the first one
            if v != v or better(v, r[best]):
                best = i
        return best

    # torch gives int64, which this stand-in does not have: int32 (the twins call .int()).
    return Tensor([one(r) for r in rows], shape, int32)


def argmax(x, dim):
    return _arg(x, dim, lambda v, b: v > b)


def argmin(x, dim):
    return _arg(x, dim, lambda v, b: v < b)


def arange(n, dtype=None, device=None):
    t = Tensor(list(range(n)), (n,), dtype or int32)
    return t._on(device) if device is not None else t


def isnan(x):
    return Tensor([1 if v != v else 0 for v in x._data], x.shape, bool)


def isinf(x):
    return Tensor([1 if v in (math.inf, -math.inf) else 0 for v in x._data], x.shape, bool)


def mm(a, b, out_dtype=None):
    if a.dtype is not b.dtype:
        raise TypeError("fake torch: mm of %r and %r" % (a.dtype, b.dtype))
    if not a.dtype.is_floating_point:
        raise TypeError("fake torch: mm of %r (cuBLAS has no integer GEMM)" % a.dtype)
    (m, k), (k2, n) = a.shape, b.shape
    assert k == k2, "mm: inner sizes differ"
    out = [
        sum_(a._data[i * k + l] * b._data[l * n + j] for l in range(k)) for i in range(m) for j in range(n)
    ]
    return Tensor(out, (m, n), out_dtype or a.dtype)


def matmul(a, b, out_dtype=None):
    """`a @ b` of matrices or of batches of matrices; the batch dims must be equal (torch
    broadcasts them; the twins never need it)."""
    if a.dim() == 2 and b.dim() == 2:
        return mm(a, b, out_dtype)
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
        raise ValueError("fake torch: matmul of shapes %r and %r" % (tuple(a.shape), tuple(b.shape)))
    batch = tuple(a.shape[:-2])
    (m, k), n = a.shape[-2:], b.shape[-1]
    out = []
    for i in range(_numel(batch)):
        ai = Tensor(a._data[i * m * k : (i + 1) * m * k], (m, k), a.dtype)
        bi = Tensor(b._data[i * k * n : (i + 1) * k * n], tuple(b.shape[-2:]), b.dtype)
        out.extend(mm(ai, bi, out_dtype)._data)
    return Tensor(out, batch + (m, n), out_dtype or a.dtype)


def bmm(a, b, out_dtype=None):
    assert a.dim() == 3 and b.dim() == 3, "bmm of tensors that are not 3-D"
    return matmul(a, b, out_dtype)


def _scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """cuBLASLt's FP8 GEMM `a @ b` with f32 scales, as torch's checks it: `a` [M, K] row-major
    and `b` [K, N] column-major FP8; scales per tensor (one element each), row-wise
    (`scale_a` [M, 1], `scale_b` [1, N]) or block-wise (K % 128 == 0; `scale_a` [M, K/128]
    column-major: 1 x 128 blocks of `a`; `scale_b` [K/128, ceil(N/128)] with strides (1,
    K/128): 128 x 128 blocks of `b`); any other scaling raises "Invalid scaling
    configuration." as torch does. Computed in float64, rounded to `out_dtype`."""
    if bias is not None or scale_result is not None:
        raise RuntimeError("fake torch: _scaled_mm with a bias or a result scale")
    for x in (a, b):
        if x.dim() != 2 or x.dtype not in (float8_e4m3fn, float8_e5m2):
            raise RuntimeError("fake torch: _scaled_mm of %r %r" % (x.dtype, tuple(x.shape)))
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (%dx%d and %dx%d)" % (m, k, k2, n))
    if a.stride() != (k, 1):
        raise RuntimeError("mat1 must be row_major")
    if b.stride() != (1, k):
        raise RuntimeError("mat2 must be col_major")
    if scale_a.dtype is not float32 or scale_b.dtype is not float32:
        raise RuntimeError("Invalid scaling configuration.")
    kb, nb = k // 128, -(-n // 128)
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        sa = lambda i, l: scale_a._data[0]  # noqa: E731
        sb = lambda l, j: scale_b._data[0]  # noqa: E731
    elif tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        sa = lambda i, l: scale_a._data[i]  # noqa: E731
        sb = lambda l, j: scale_b._data[j]  # noqa: E731
    elif (
        k % 128 == 0
        and tuple(scale_a.shape) == (m, kb)
        and (m == 1 or scale_a.stride(0) == 1)
        and (kb == 1 or scale_a.stride(1) == m)
        and tuple(scale_b.shape) == (kb, nb)
        and (kb == 1 or scale_b.stride(0) == 1)
        and (nb == 1 or scale_b.stride(1) == kb)
    ):
        sa = lambda i, l: scale_a._data[i * kb + l // 128]  # noqa: E731
        sb = lambda l, j: scale_b._data[(l // 128) * nb + j // 128]  # noqa: E731
    else:
        raise RuntimeError("Invalid scaling configuration.")
    out = [
        sum_(a._data[i * k + l] * b._data[l * n + j] * sa(i, l) * sb(l, j) for l in range(k))
        for i in range(m)
        for j in range(n)
    ]
    return Tensor(out, (m, n), out_dtype or a.dtype)


def addmm(bias, a, b):
    return mm(a, b) + bias


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)))


def _addmm_activation(bias, a, b, beta=1, alpha=1, use_gelu=False):
    act = _gelu_tanh if use_gelu else (lambda v: v if v > 0 else 0.0)
    return _unary(act, addmm(bias, a, b))


def einsum(eq, *ops):
    lhs, out = eq.replace(" ", "").split("->")
    subs = lhs.split(",")
    assert len(subs) == len(ops)
    for t in ops[1:]:
        if t.dtype is not ops[0].dtype:
            raise TypeError("fake torch: einsum of %r and %r" % (ops[0].dtype, t.dtype))
    size = {}
    for s, t in zip(subs, ops):
        assert len(s) == t.dim(), "einsum: %s for a tensor of rank %d" % (s, t.dim())
        for c, n in zip(s, t.shape):
            assert size.setdefault(c, n) == n, "einsum: sizes of %s differ" % c
    letters = sorted(size)
    out_shape = tuple(size[c] for c in out)
    acc = {}
    for idx in _indices(tuple(size[c] for c in letters)):
        at = dict(zip(letters, idx))
        p = 1.0
        for s, t in zip(subs, ops):
            p *= t._at(tuple(at[c] for c in s))
        key = tuple(at[c] for c in out)
        acc[key] = acc.get(key, 0.0) + p
    return Tensor([acc.get(k, 0.0) for k in _indices(out_shape)], out_shape, ops[0].dtype)


def tensor(values, dtype=float32, device=None):
    if isinstance(values, (list, tuple)):
        t = Tensor(list(values), (len(values),), dtype)
    else:
        t = Tensor([values], (), dtype)
    return t if device is None else t._on(device)


def as_tensor(value, dtype=None, device=None):
    if isinstance(value, Tensor):
        t = value if dtype is None else value.to(dtype)
        return t if device is None else t._on(device)
    return tensor(value, dtype=dtype or float32, device=device)


def frombuffer(buf, dtype):
    raw = bytes(buf)
    if dtype is bfloat16:
        vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for (h,) in struct.iter_unpack("<H", raw)]
    elif dtype.name in _FP8:
        vals = [_fp8_value(b, dtype) for b in raw]
    else:
        vals = [v for (v,) in struct.iter_unpack(dtype.fmt, raw)]
    return Tensor(vals, (len(vals),), dtype)


def to_bytes(t):
    """The tensor's little-endian bytes (what `t.cpu().numpy().tobytes()` gives with torch)."""
    if t.dtype is bfloat16:
        return b"".join(struct.pack("<H", _f32_bits(v) >> 16) for v in t._data)
    if t.dtype.name in _FP8:
        return bytes(_fp8_byte(v, t.dtype) for v in t._data)
    return b"".join(struct.pack(t.dtype.fmt, v) for v in t._data)


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        size = tuple(size[0])
    return tuple(int(n) for n in size)


def empty(*size, dtype=float32, device=None):
    """Zeros (the stand-in has no uninitialised memory)."""
    shape = _size(size)
    t = Tensor([0] * _numel(shape), shape, dtype)
    if device is not None:
        t.device = globals()["device"](device)
    return t


zeros = empty


class _FileTensor(Tensor):
    """`from_file(..., shared=True)`: writes go to the file."""

    def __init__(self, path, n, dt):
        Tensor.__init__(self, [0] * n, (n,), dt)
        self._path = path

    def copy_(self, src):
        Tensor.copy_(self, src)
        with open(self._path, "r+b") as f:
            f.write(to_bytes(self))
        return self


def from_file(path, shared=False, size=0, dtype=float32):
    if shared:
        return _FileTensor(path, size, dtype)
    with open(path, "rb") as f:
        raw = f.read(size * dtype.itemsize)
    assert len(raw) == size * dtype.itemsize, "from_file: %s is too short" % path
    return frombuffer(raw, dtype)


def compile(fn, **kwargs):  # noqa: A001
    return fn


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0

    def synchronize(self):
        pass


class _Cuda:
    Event = _Event

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def get_device_name(i=0):
        return "fake"

    @staticmethod
    def empty_cache():
        pass


    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def current_stream(device=None):
        return _Stream()


class _Stream:
    # The legacy default stream's handle.
    cuda_stream = 0


cuda = _Cuda()


class _CustomOp:
    """What `library.custom_op` returns: calls the function; `register_fake` keeps the fake
    implementation where torch keeps it (`_abstract_fn`)."""

    def __init__(self, name, fn, schema):
        self._name, self._fn, self._schema = name, fn, schema
        self._abstract_fn = None

    def register_fake(self, fn):
        self._abstract_fn = fn
        return fn

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class _Namespace:
    pass


ops = _Namespace()


class _Library:
    @staticmethod
    def custom_op(name, fn=None, *, mutates_args, device_types=None, schema=None):
        namespace, sep, op_name = name.partition("::")
        if not sep or not namespace or not op_name:
            raise ValueError("fake torch: a custom op name is namespace::name, not %r" % name)
        if schema is not None and not (schema.startswith("(") and ") -> " in schema):
            raise ValueError("fake torch: a schema is (args) -> returns, not %r" % schema)

        def register(f):
            op = _CustomOp(name, f, schema)
            if not hasattr(ops, namespace):
                setattr(ops, namespace, _Namespace())
            setattr(getattr(ops, namespace), op_name, op)
            return op

        return register if fn is None else register(fn)


library = _Library()


class _Flags:
    pass


backends = _Flags()
backends.cuda = _Flags()
backends.cuda.matmul = _Flags()
backends.cuda.matmul.allow_tf32 = False
backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
