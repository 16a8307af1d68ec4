//! The op table: every op of the fusion language in one place, with its name (and aliases),
//! how many operands it takes, its typing rule and its documentation ([`OPS`]).
//!
//! The builder (`fusion::build`) resolves calls and reports arity and dtype errors through it,
//! the playground's reference and `docs/language.md` list it, and the editor completes its
//! names. What an op *does* stays with each back end, in an exhaustive `match` on the enums
//! below (Naga's layout): [`UnaryOp::eval`] and friends here for the float64 reference and the
//! builder's constant folding, `codegen::expr` for CUDA, `torch` for the PyTorch twin.
//!
//! Values are float64 everywhere on the host: integers and bools are exact in it, a bool is 0
//! or 1, and the semantics of each op are PyTorch's (`round` to nearest even, `remainder` with
//! the divisor's sign, shifts by 32 or more as torch's CUDA kernels do them).

use crate::dtype::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Exp,
    Relu,
    Abs,
    Sqrt,
    Rsqrt,
    Tanh,
    /// `tanh` within about 2^-21 of its value in absolute terms (a few ulp of 1) but not
    /// relative ones near 0: not in the language, a tanh whose value reaches an online softmax's scores
    /// only through sums and products (a softcap, `cap * tanh(s / cap)`), where the error
    /// scales with the factor as the f32 rounding of the term does (pass `online_softmax`).
    /// `1 - 2 / (2^(2x log2(e)) + 1)`: PTX `ex2.approx.ftz.f32` and `rcp.approx.ftz.f32`, where
    /// CUDA's `tanhf` evaluates two ranges and selects.
    TanhAbs,
    /// `tanh(x, approximate=hardware)`: the hardware's approximation, PTX `tanh.approx.f32`
    /// (one MUFU.TANH; relative error at most about 2^-11, the PTX ISA's bound), which
    /// FlashAttention-3 uses for its softcap. f32 only (f64 keeps the precise `tanh`).
    TanhApprox,
    Sigmoid,
    Log,
    Log2,
    Log1p,
    Exp2,
    /// `2^x` with a result below 2^-126 (a subnormal) flushed to 0: not in the language, the
    /// exponentials of an online softmax or log-sum-exp in base 2 (passes `online_softmax`,
    /// `online_logsumexp`), each at most 1 next to the row maximum's 1, where such a result
    /// is below the rounding of the sum it joins. PTX `ex2.approx.ftz.f32`: one MUFU.EX2.
    Exp2Ftz,
    /// `2^x` on the FMA pipe instead of the MUFU (FlashAttention-4's software exponential):
    /// `x = n + f` with `n = rint(x)`, `2^f` by a degree-3 polynomial on `[-1/2, 1/2]`
    /// (relative error 7.5e-5, far inside bf16's 2^-9), `n` added to its exponent bits; a
    /// result below 2^-125 is 0. Not in the language: pass `fma_exp2` puts a quarter of an
    /// online softmax's `Exp2Ftz` exponentials on it where the scores already take a MUFU op.
    Exp2Fma,
    Expm1,
    Erf,
    Sin,
    Cos,
    Floor,
    Ceil,
    /// To nearest, ties to even (`torch.round`).
    Round,
    Trunc,
    Reciprocal,
    Sign,
    Silu,
    /// The exact GELU, `x * Phi(x)` with the normal CDF through `erf`.
    Gelu,
    /// GELU's tanh approximation (`gelu(x, approximate=tanh)`).
    GeluTanh,
    /// `log(1 + e^x)`, and `x` itself above 20 (torch's default threshold).
    Softplus,
    IsNan,
    IsInf,
    LogicalNot,
    BitwiseNot,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 34] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Relu,
        UnaryOp::Abs,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::TanhAbs,
        UnaryOp::TanhApprox,
        UnaryOp::Sigmoid,
        UnaryOp::Log,
        UnaryOp::Log2,
        UnaryOp::Log1p,
        UnaryOp::Exp2,
        UnaryOp::Exp2Ftz,
        UnaryOp::Exp2Fma,
        UnaryOp::Expm1,
        UnaryOp::Erf,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Trunc,
        UnaryOp::Reciprocal,
        UnaryOp::Sign,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Softplus,
        UnaryOp::IsNan,
        UnaryOp::IsInf,
        UnaryOp::LogicalNot,
        UnaryOp::BitwiseNot,
    ];

    /// The op's entry in [`OPS`] (`gelu`'s for both forms of GELU, `exp2`'s for both forms of
    /// 2^x).
    pub fn def(self) -> &'static OpDef {
        let kind = match self {
            UnaryOp::GeluTanh => OpKind::Unary(UnaryOp::Gelu),
            UnaryOp::Exp2Ftz | UnaryOp::Exp2Fma => OpKind::Unary(UnaryOp::Exp2),
            UnaryOp::TanhAbs | UnaryOp::TanhApprox => OpKind::Unary(UnaryOp::Tanh),
            u => OpKind::Unary(u),
        };
        lookup_kind(kind)
    }

    /// The name in the IR dumps and in the names of anonymous tensors.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Exp2Ftz => "exp2_ftz",
            UnaryOp::Exp2Fma => "exp2_fma",
            UnaryOp::TanhAbs => "tanh_abs",
            UnaryOp::TanhApprox => "tanh_approx",
            u => u.def().name,
        }
    }

    /// MUFU instructions the op's f32 form compiles to on its fast path, as the code generator
    /// writes it (NVRTC 13.0's SASS for sm_90a; the unit retires 16 results per SM cycle, the
    /// FMA pipe 128): `tanh_approx` one MUFU.TANH; the exponentials (`expf`,
    /// `exp2f`, `ex2.approx`) one MUFU.EX2; `rsqrtf`, `sqrtf` one MUFU.RSQ; a reciprocal (an
    /// IEEE division) one MUFU.RCP; `tanh_abs`, `tanhf` and the sigmoid a MUFU.EX2 and a
    /// MUFU.RCP. The precise `logf`, `log2f`, `sinf` and `cosf` are polynomials: none.
    pub fn mufu_ops(self) -> u32 {
        match self {
            UnaryOp::TanhAbs | UnaryOp::Tanh | UnaryOp::Sigmoid => 2,
            UnaryOp::TanhApprox
            | UnaryOp::Exp
            | UnaryOp::Exp2
            | UnaryOp::Exp2Ftz
            | UnaryOp::Rsqrt
            | UnaryOp::Sqrt
            | UnaryOp::Reciprocal => 1,
            _ => 0,
        }
    }

    /// The op on a float64 value (integers and bools are exact in it).
    pub fn eval(self, x: f64) -> f64 {
        const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
        let truth = |b: bool| b as u8 as f64;
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Relu => maximum(x, 0.0),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            // The function it approximates (the float64 reference of the kernel IR).
            UnaryOp::Tanh | UnaryOp::TanhAbs | UnaryOp::TanhApprox => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Log => x.ln(),
            UnaryOp::Log2 => x.log2(),
            UnaryOp::Log1p => x.ln_1p(),
            UnaryOp::Exp2 => x.exp2(),
            UnaryOp::Exp2Ftz => {
                let y = x.exp2();
                if y < f64::from(f32::MIN_POSITIVE) {
                    0.0
                } else {
                    y
                }
            }
            UnaryOp::Exp2Fma => {
                if x < -125.0 {
                    0.0
                } else {
                    x.exp2()
                }
            }
            UnaryOp::Expm1 => x.exp_m1(),
            UnaryOp::Erf => libm::erf(x),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Round => x.round_ties_even(),
            UnaryOp::Trunc => x.trunc(),
            UnaryOp::Reciprocal => 1.0 / x,
            // (0 < x) - (x < 0), as torch computes it: NaN gives 0.
            UnaryOp::Sign => truth(0.0 < x) - truth(x < 0.0),
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Gelu => 0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)),
            UnaryOp::GeluTanh => {
                0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
            }
            UnaryOp::Softplus => {
                if x > SOFTPLUS_THRESHOLD {
                    x
                } else {
                    x.exp().ln_1p()
                }
            }
            UnaryOp::IsNan => truth(x.is_nan()),
            UnaryOp::IsInf => truth(x.is_infinite()),
            UnaryOp::LogicalNot => truth(x == 0.0),
            // On the integer it holds (the builder allows integers and bools only; a bool is
            // `not`); an 8-bit result wraps into its type after (`DType::arithmetic_result`).
            UnaryOp::BitwiseNot => !(x as i64) as f64,
        }
    }
}

/// `torch.maximum(a, b)`: NaN when either is NaN (`f64::max` would return the other operand,
/// IEEE's maxNum). `max`, `max(x, axis=)`, `relu` and `clamp` are this.
pub fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// `torch.minimum(a, b)`: NaN when either is NaN, as [`maximum`].
pub fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// Above this, `softplus(x)` is `x` (torch's default `threshold=20` with `beta=1`).
pub const SOFTPLUS_THRESHOLD: f64 = 20.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    /// Remainder with the dividend's sign (C's `fmod`, `%` on integers).
    Fmod,
    /// Remainder with the divisor's sign (Python's `%`, `torch.remainder`).
    Remainder,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    ShiftLeft,
    /// Arithmetic (sign-filling) right shift.
    ShiftRight,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 23] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Fmod,
        BinaryOp::Remainder,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::LogicalAnd,
        BinaryOp::LogicalOr,
        BinaryOp::LogicalXor,
        BinaryOp::BitwiseAnd,
        BinaryOp::BitwiseOr,
        BinaryOp::BitwiseXor,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRight,
    ];

    pub fn def(self) -> &'static OpDef {
        lookup_kind(match self {
            BinaryOp::Max => OpKind::ElementwiseOrReduce(BinaryOp::Max, ReduceOp::Max),
            BinaryOp::Min => OpKind::ElementwiseOrReduce(BinaryOp::Min, ReduceOp::Min),
            b => OpKind::Binary(b),
        })
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The op on float64 values (integers and bools are exact in it; the bitwise ops work on
    /// the integer they hold, the shifts on the i32).
    pub fn eval(self, a: f64, b: f64) -> f64 {
        let truth = |v: bool| v as u8 as f64;
        let int = |v: f64| v as i64 as i32;
        let long = |v: f64| v as i64;
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max => maximum(a, b),
            BinaryOp::Min => minimum(a, b),
            BinaryOp::Pow => a.powf(b),
            BinaryOp::Fmod => a % b,
            BinaryOp::Remainder => {
                let r = a % b;
                if r != 0.0 && (r < 0.0) != (b < 0.0) {
                    r + b
                } else {
                    r
                }
            }
            BinaryOp::Lt => truth(a < b),
            BinaryOp::Le => truth(a <= b),
            BinaryOp::Gt => truth(a > b),
            BinaryOp::Ge => truth(a >= b),
            BinaryOp::Eq => truth(a == b),
            BinaryOp::Ne => truth(a != b),
            BinaryOp::LogicalAnd => truth(a != 0.0 && b != 0.0),
            BinaryOp::LogicalOr => truth(a != 0.0 || b != 0.0),
            BinaryOp::LogicalXor => truth((a != 0.0) != (b != 0.0)),
            BinaryOp::BitwiseAnd => (long(a) & long(b)) as f64,
            BinaryOp::BitwiseOr => (long(a) | long(b)) as f64,
            BinaryOp::BitwiseXor => (long(a) ^ long(b)) as f64,
            // torch: a shift by a negative amount or by 32 or more gives 0 (left) or the sign
            // (right), where C leaves it undefined.
            BinaryOp::ShiftLeft => match u32::try_from(int(b)) {
                Ok(s) if s < 32 => ((int(a) as u32) << s) as i32 as f64,
                _ => 0.0,
            },
            BinaryOp::ShiftRight => match u32::try_from(int(b)) {
                Ok(s) if s < 32 => (int(a) >> s) as f64,
                _ => (int(a) >> 31) as f64,
            },
        }
    }

    /// The result is bool whatever the operands are.
    pub fn gives_bool(self) -> bool {
        matches!(self.def().typing, Typing::Compare | Typing::Logical)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TernaryOp {
    /// `where(cond, a, b)`: `a` where `cond` is true (non-zero), else `b`.
    Where,
    /// `clamp(x, lo, hi)`: `min(max(x, lo), hi)`, a NaN in any operand giving NaN (torch's
    /// clamp on CUDA with tensor bounds).
    Clamp,
    /// `lerp(a, b, w)`: `a + w * (b - a)`, in torch's two-sided form.
    Lerp,
    /// `fma(a, b, c)`: `a * b + c` with one rounding.
    Fma,
    /// `rand`'s value at one element, of (seed, offset, linear index) read as i64: a uniform
    /// f32 in [0, 1) from Philox-4x32-10 (`fusion::philox`).
    Rand,
    /// `randn`'s: a standard normal by Box-Muller from the same generator.
    RandN,
}

impl TernaryOp {
    pub const ALL: [TernaryOp; 6] = [
        TernaryOp::Where,
        TernaryOp::Clamp,
        TernaryOp::Lerp,
        TernaryOp::Fma,
        TernaryOp::Rand,
        TernaryOp::RandN,
    ];

    pub fn def(self) -> &'static OpDef {
        lookup_kind(match self {
            TernaryOp::Rand | TernaryOp::RandN => OpKind::Random(self),
            t => OpKind::Ternary(t),
        })
    }

    /// The type operand `i` is read in when the op computes in `compute`: `where`'s
    /// condition is a truth value (bool), the generator's seed, offset and index are i64.
    pub fn operand_type(self, i: usize, compute: DType) -> DType {
        match self {
            TernaryOp::Where if i == 0 => DType::Bool,
            TernaryOp::Rand | TernaryOp::RandN => DType::I64,
            _ => compute,
        }
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }

    pub fn eval(self, a: f64, b: f64, c: f64) -> f64 {
        match self {
            TernaryOp::Where => {
                if a != 0.0 {
                    b
                } else {
                    c
                }
            }
            TernaryOp::Clamp => minimum(maximum(a, b), c),
            // torch's lerp: exact at both ends.
            TernaryOp::Lerp => {
                if c.abs() < 0.5 {
                    a + c * (b - a)
                } else {
                    b - (b - a) * (1.0 - c)
                }
            }
            TernaryOp::Fma => a.mul_add(b, c),
            // Integers exact in f64 (the builder keeps literal seeds below 2^53; the runner's
            // values are whole numbers).
            TernaryOp::Rand => super::philox::uniform(a as i64, b as i64, c as i64),
            TernaryOp::RandN => super::philox::normal(a as i64, b as i64, c as i64),
        }
    }
}

// Reductions and the composites built of them (issue 33): grouped here so that the other
// additions to this table merge apart from them.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    Prod,
    /// Is any element non-zero (a bool).
    Any,
    /// Is every element non-zero (a bool).
    All,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
        ReduceOp::Any,
        ReduceOp::All,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
            ReduceOp::Any => "any",
            ReduceOp::All => "all",
        }
    }

    /// The op's entry in [`OPS`] (`max`'s and `min`'s are also their elementwise forms').
    pub fn def(self) -> &'static OpDef {
        lookup_kind(match self {
            ReduceOp::Max => OpKind::ElementwiseOrReduce(BinaryOp::Max, ReduceOp::Max),
            ReduceOp::Min => OpKind::ElementwiseOrReduce(BinaryOp::Min, ReduceOp::Min),
            r => OpKind::Reduce(r),
        })
    }

    /// The value of a reduction over no elements (and the accumulator's start): torch's for
    /// `sum`, `prod`, `any` and `all`; `max` and `min` of nothing are errors in torch, and
    /// their identities (-inf and inf) are what the kernel starts from.
    pub fn identity(self) -> f64 {
        match self {
            ReduceOp::Sum | ReduceOp::Any => 0.0,
            ReduceOp::Prod | ReduceOp::All => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
        }
    }

    pub fn combine(self) -> BinaryOp {
        match self {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Max => BinaryOp::Max,
            ReduceOp::Min => BinaryOp::Min,
            ReduceOp::Prod => BinaryOp::Mul,
            ReduceOp::Any => BinaryOp::LogicalOr,
            ReduceOp::All => BinaryOp::LogicalAnd,
        }
    }
}

/// Reductions the builder writes as several ops of the IR (the kernel, the reference and the
/// schedule see those ops); the fusion records each call ([`super::Composite`]) so that the
/// torch twin writes it as one torch call, as a PyTorch user would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompositeOp {
    /// `sum(x) / n`, `n` the number of elements reduced, read at run time (a size symbol's
    /// value or a product of them).
    Mean,
    /// Built as two passes: `m = mean(x)`, then `sum((x - m)^2) / (n - correction)`, each a
    /// plain sum the reduction lowering parallelises (thread, block and rfactor reductions);
    /// the second pass reads `x` again, from registers or shared memory when the schedule
    /// caches the row, and it is the numerically stable form (no `E[x^2] - E[x]^2`
    /// cancellation). The schedule's `welford(v)` computes both sums in one pass instead
    /// (`passes::welford`: Welford's update per thread, Chan's combine across threads). `correction` is torch's (1: Bessel's, the default; 0: the population
    /// variance; the call's `correction=`, kept in [`super::Composite`]); `n - correction <= 0`
    /// gives inf or NaN, as torch's does.
    Var,
    /// `m + log(sum(exp(x - m)))`, `m = max(x)` with an infinite `m` replaced by 0 (torch's
    /// stable form: a row of `-inf` gives `-inf`, a row with `+inf` gives `+inf`).
    LogSumExp,
    /// The first index of the maximum along one axis (an i32; torch's `argmax` gives int64,
    /// which the language does not have): `m = max(x)`, then the smallest index `i` with
    /// `x[i] == m`, found as a `min` of `i + n` over those elements (`n` the axis's extent) and
    /// of `i` over NaN elements, so that a NaN wins as it does in torch and ties go to the first
    /// occurrence; the result is that minimum less `n` when it is at least `n`. Two reductions,
    /// each one the lowering already parallelises (no pair-valued combine). Indices reach
    /// `2n`: `n` must stay below 2^30. An empty axis gives 2147483647 (torch raises).
    ArgMax,
    /// As [`CompositeOp::ArgMax`] with `min` (a NaN wins here too, as in torch).
    ArgMin,
}

impl CompositeOp {
    pub fn name(self) -> &'static str {
        match self {
            CompositeOp::Mean => "mean",
            CompositeOp::Var => "var",
            CompositeOp::LogSumExp => "logsumexp",
            CompositeOp::ArgMax => "argmax",
            CompositeOp::ArgMin => "argmin",
        }
    }
}

/// What the builder makes of a call of the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Ternary(TernaryOp),
    /// `max(a, b)` elementwise, `max(x, axis=1)` a reduction.
    ElementwiseOrReduce(BinaryOp, ReduceOp),
    Reduce(ReduceOp),
    /// A reduction written as several ops (`mean`, `var`, `logsumexp`, `argmax`).
    Composite(CompositeOp),
    /// `v, m = var_mean(x, axis=1)`: the variance (this composite) and the mean, assigned to
    /// two names (the builder's tuple assignment).
    VarMean(CompositeOp),
    /// `iota(x, axis=k)`: the index along axis `k` of `x`'s shape.
    Iota,
    /// `full([M, N], value)`: a tensor of that shape holding the value.
    Full,
    /// `rand(x, seed, offset)` / `randn(...)`: the generator at each element of `x`'s shape
    /// (the builder makes the element's linear index and applies the ternary op).
    Random(TernaryOp),
    Broadcast,
    Cast,
    Set,
    // Views (see `fusion::build`'s module doc for how they map onto the IR).
    Permute,
    Transpose,
    Expand,
    Slice,
    Pad,
    Cat,
    Reshape,
    ExpandBlocks,
    // Matrix products, written out by the builder as the sum of broadcast products the
    // tensor-core schedules lower (`fusion::build::products`).
    /// `matmul(a, b)`: `[..., M, K] x [..., K, N]`.
    MatMul,
    /// `linear(x, w)`, `linear(x, w, bias)`: `x [..., K]` times `w [N, K]` transposed.
    Linear,
    // Indexing with indices loaded from data (`fusion::build::gather`).
    /// `gather(x, index, axis=k)`: `index` has the result's shape.
    Gather,
    /// `index_select(x, k, index)`: `index` is 1-D.
    IndexSelect,
}

/// How an op's result type (and the type it computes in) follows from its operands'. Operand
/// types promote as PyTorch's do: bool < u8, i8 < i32 < i64 < float, the wider float winning,
/// f16, bf16 and the 8-bit floats computing in f32; a literal with a fraction makes integer
/// operands compute in f32. u8 with i8 is refused (torch makes them int16, which hopfuse has
/// not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Typing {
    /// Arithmetic: the promoted type (integers stay integers); bool operands alone are
    /// refused (there is no bool arithmetic).
    Numeric,
    /// Floating-point math: integer and bool operands compute in f32.
    Float,
    /// Compares in the promoted type; the result is bool.
    Compare,
    /// Reads each operand as a truth value (non-zero is true); the result is bool.
    Logical,
    /// Integer (any width) or bool operands; the result is their promoted type.
    Bitwise,
    /// Integer operands only (shifts).
    Integer,
    /// `where`: the condition is read as a truth value, the result is the two values'
    /// promoted type.
    Select,
    /// The operand's type (copies, broadcasts).
    Same,
    /// The dtype argument (`cast`).
    Cast,
    /// An index: i32 whatever the operand (whose values are not read, or only compared).
    Index,
    /// A random number: f32; seed, offset and index are integers.
    Random,
}

impl Typing {
    /// What the rule says in the reference.
    pub fn describe(self) -> &'static str {
        match self {
            Typing::Numeric => "the operands' promoted type (integers stay integers; not bool)",
            Typing::Float => "floating point: integer and bool operands compute in f32",
            Typing::Compare => "bool (compared in the operands' promoted type)",
            Typing::Logical => "bool (each operand read as a truth value, non-zero is true)",
            Typing::Bitwise => "integer or bool operands; their promoted type",
            Typing::Integer => "i32 operands; i32",
            Typing::Select => {
                "the promoted type of the two values (the condition read as a truth value)"
            }
            Typing::Same => "the operand's type",
            Typing::Cast => "the dtype given",
            Typing::Index => "i32 (an index)",
            Typing::Random => "f32 (seed and offset integers)",
        }
    }
}

/// One op of the language.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    pub name: &'static str,
    /// Other names of the same op (operators are written in `signature`).
    pub aliases: &'static [&'static str],
    pub kind: OpKind,
    /// Positional operands.
    pub arity: usize,
    /// Named arguments it takes.
    pub named: &'static [&'static str],
    pub typing: Typing,
    /// How it is written.
    pub signature: &'static str,
    /// What it does, for the reference (empty in wasm32 builds, see `op`).
    pub doc: &'static str,
}

const fn op(
    name: &'static str,
    kind: OpKind,
    arity: usize,
    typing: Typing,
    signature: &'static str,
    doc: &'static str,
) -> OpDef {
    OpDef {
        name,
        aliases: &[],
        kind,
        arity,
        named: &[],
        typing,
        signature,
        // The playground runs the compiler in wasm32 but shows the reference from
        // `web/reference.json` (generated from this table by native builds): the text would only
        // add to the page's cold load, and a const's unused literals are not emitted.
        doc: if cfg!(target_arch = "wasm32") {
            ""
        } else {
            doc
        },
    }
}

const fn unary(
    name: &'static str,
    u: UnaryOp,
    typing: Typing,
    signature: &'static str,
    doc: &'static str,
) -> OpDef {
    op(name, OpKind::Unary(u), 1, typing, signature, doc)
}

const fn binary(
    name: &'static str,
    b: BinaryOp,
    typing: Typing,
    signature: &'static str,
    doc: &'static str,
) -> OpDef {
    op(name, OpKind::Binary(b), 2, typing, signature, doc)
}

use OpKind as K;
use Typing as T;

/// Every op, in the order the reference lists them.
#[rustfmt::skip]
pub const OPS: &[OpDef] = &[
    unary("neg", UnaryOp::Neg, T::Numeric, "neg(x)", "Elementwise negation (also `-x`)."),
    unary("abs", UnaryOp::Abs, T::Numeric, "abs(x)", "Elementwise absolute value."),
    unary("relu", UnaryOp::Relu, T::Numeric, "relu(x)", "Elementwise max(x, 0); NaN stays NaN (as torch.relu)."),
    unary("sign", UnaryOp::Sign, T::Numeric, "sign(x)", "Elementwise -1, 0 or 1 by the sign of x (0 for NaN, as torch)."),
    unary("floor", UnaryOp::Floor, T::Numeric, "floor(x)", "Elementwise largest integer <= x (integers unchanged)."),
    unary("ceil", UnaryOp::Ceil, T::Numeric, "ceil(x)", "Elementwise smallest integer >= x (integers unchanged)."),
    unary("round", UnaryOp::Round, T::Numeric, "round(x)", "Elementwise nearest integer, ties to even (as torch.round: round(2.5) = 2)."),
    unary("trunc", UnaryOp::Trunc, T::Numeric, "trunc(x)", "Elementwise x rounded toward zero."),
    unary("exp", UnaryOp::Exp, T::Float, "exp(x)", "Elementwise e^x."),
    unary("exp2", UnaryOp::Exp2, T::Float, "exp2(x)", "Elementwise 2^x."),
    unary("expm1", UnaryOp::Expm1, T::Float, "expm1(x)", "Elementwise e^x - 1, accurate near 0."),
    unary("log", UnaryOp::Log, T::Float, "log(x)", "Elementwise natural logarithm (-inf at 0, NaN below)."),
    unary("log2", UnaryOp::Log2, T::Float, "log2(x)", "Elementwise base-2 logarithm."),
    unary("log1p", UnaryOp::Log1p, T::Float, "log1p(x)", "Elementwise log(1 + x), accurate near 0."),
    unary("sqrt", UnaryOp::Sqrt, T::Float, "sqrt(x)", "Elementwise square root."),
    unary("rsqrt", UnaryOp::Rsqrt, T::Float, "rsqrt(x)", "Elementwise 1 / sqrt(x)."),
    unary("reciprocal", UnaryOp::Reciprocal, T::Float, "reciprocal(x)", "Elementwise 1 / x."),
    unary("sin", UnaryOp::Sin, T::Float, "sin(x)", "Elementwise sine (radians)."),
    unary("cos", UnaryOp::Cos, T::Float, "cos(x)", "Elementwise cosine (radians)."),
    OpDef {
        named: &["approximate"],
        ..unary("tanh", UnaryOp::Tanh, T::Float, "tanh(x) | tanh(x, approximate=hardware)",
            "Elementwise hyperbolic tangent: precise (approximate=none, the default), or the hardware's approximation (approximate=hardware: PTX tanh.approx.f32, one MUFU.TANH, relative error at most about 2^-11; FlashAttention-3's softcap uses it). The approximation is computed in f32 (an f64 tanh stays precise), and an output computed from it is validated with at least 1e-3 (as a bf16 product's f32 result) rather than f32's 1e-5. The torch twin computes torch.tanh.")
    },
    unary("erf", UnaryOp::Erf, T::Float, "erf(x)", "Elementwise error function."),
    unary("sigmoid", UnaryOp::Sigmoid, T::Float, "sigmoid(x)", "Elementwise 1 / (1 + e^-x)."),
    unary("silu", UnaryOp::Silu, T::Float, "silu(x)", "Elementwise x * sigmoid(x) (SiLU, swish)."),
    OpDef {
        named: &["approximate"],
        ..unary("gelu", UnaryOp::Gelu, T::Float, "gelu(x) | gelu(x, approximate=tanh)",
            "Elementwise GELU: exact, x * (1 + erf(x / sqrt(2))) / 2 (approximate=none, the default), or its tanh approximation (approximate=tanh), as torch.nn.functional.gelu.")
    },
    unary("softplus", UnaryOp::Softplus, T::Float, "softplus(x)", "Elementwise log(1 + e^x); x itself above 20 (torch's softplus with beta=1, threshold=20)."),
    unary("isnan", UnaryOp::IsNan, T::Compare, "isnan(x)", "Elementwise: is x NaN (a bool)."),
    unary("isinf", UnaryOp::IsInf, T::Compare, "isinf(x)", "Elementwise: is x an infinity (a bool)."),
    unary("logical_not", UnaryOp::LogicalNot, T::Logical, "logical_not(x)", "Elementwise: is x zero (a bool)."),
    unary("bitwise_not", UnaryOp::BitwiseNot, T::Bitwise, "bitwise_not(x)", "Elementwise ~x on an integer type (logical not on bool)."),
    binary("add", BinaryOp::Add, T::Numeric, "add(a, b) | a + b", "Elementwise a + b. Operands have the same rank (use broadcast) or one is a number or a scalar input."),
    binary("sub", BinaryOp::Sub, T::Numeric, "sub(a, b) | a - b", "Elementwise a - b."),
    binary("mul", BinaryOp::Mul, T::Numeric, "mul(a, b) | a * b", "Elementwise a * b."),
    binary("div", BinaryOp::Div, T::Float, "div(a, b) | a / b", "Elementwise true division a / b (integers divide in f32, as torch)."),
    op("max", K::ElementwiseOrReduce(BinaryOp::Max, ReduceOp::Max), 2, T::Numeric, "max(a, b) | max(x, axis=1)", "With two operands, the elementwise maximum; with `axis=`, the maximum over those axes (a reduction). A NaN operand or element gives NaN, as torch.maximum and torch.amax (not fmax's IEEE maxNum)."),
    op("min", K::ElementwiseOrReduce(BinaryOp::Min, ReduceOp::Min), 2, T::Numeric, "min(a, b) | min(x, axis=1)", "With two operands, the elementwise minimum; with `axis=`, the minimum over those axes (a reduction). A NaN operand or element gives NaN, as torch.minimum and torch.amin."),
    binary("pow", BinaryOp::Pow, T::Float, "pow(x, y)", "Elementwise x^y (floating point: an integer base computes in f32)."),
    binary("fmod", BinaryOp::Fmod, T::Numeric, "fmod(a, b)", "Elementwise remainder of a / b with the sign of a (C's fmod, torch.fmod)."),
    binary("remainder", BinaryOp::Remainder, T::Numeric, "remainder(a, b)", "Elementwise remainder of a / b with the sign of b (Python's %, torch.remainder)."),
    binary("lt", BinaryOp::Lt, T::Compare, "lt(a, b) | a < b", "Elementwise a < b (a bool)."),
    binary("le", BinaryOp::Le, T::Compare, "le(a, b) | a <= b", "Elementwise a <= b (a bool)."),
    binary("gt", BinaryOp::Gt, T::Compare, "gt(a, b) | a > b", "Elementwise a > b (a bool)."),
    binary("ge", BinaryOp::Ge, T::Compare, "ge(a, b) | a >= b", "Elementwise a >= b (a bool)."),
    binary("eq", BinaryOp::Eq, T::Compare, "eq(a, b) | a == b", "Elementwise a == b (a bool; NaN equals nothing)."),
    binary("ne", BinaryOp::Ne, T::Compare, "ne(a, b) | a != b", "Elementwise a != b (a bool)."),
    binary("logical_and", BinaryOp::LogicalAnd, T::Logical, "logical_and(a, b)", "Elementwise: both non-zero (a bool)."),
    binary("logical_or", BinaryOp::LogicalOr, T::Logical, "logical_or(a, b)", "Elementwise: either non-zero (a bool)."),
    binary("logical_xor", BinaryOp::LogicalXor, T::Logical, "logical_xor(a, b)", "Elementwise: exactly one non-zero (a bool)."),
    binary("bitwise_and", BinaryOp::BitwiseAnd, T::Bitwise, "bitwise_and(a, b)", "Elementwise a & b on integers or bool."),
    binary("bitwise_or", BinaryOp::BitwiseOr, T::Bitwise, "bitwise_or(a, b)", "Elementwise a | b on integers or bool."),
    binary("bitwise_xor", BinaryOp::BitwiseXor, T::Bitwise, "bitwise_xor(a, b)", "Elementwise a ^ b on integers or bool."),
    binary("bitwise_left_shift", BinaryOp::ShiftLeft, T::Integer, "bitwise_left_shift(a, b)", "Elementwise a << b on i32; 0 when b is negative or 32 or more (as torch)."),
    binary("bitwise_right_shift", BinaryOp::ShiftRight, T::Integer, "bitwise_right_shift(a, b)", "Elementwise arithmetic a >> b on i32; the sign (0 or -1) when b is negative or 32 or more (as torch)."),
    op("where", K::Ternary(TernaryOp::Where), 3, T::Select, "where(cond, a, b)", "Elementwise a where cond is true (non-zero), else b. A value may be a number: where(x > 0, x, 0.0)."),
    op("clamp", K::Ternary(TernaryOp::Clamp), 3, T::Numeric, "clamp(x, lo, hi)", "Elementwise min(max(x, lo), hi) (hi where lo > hi); a NaN in x, lo or hi gives NaN (as torch.clamp)."),
    op("lerp", K::Ternary(TernaryOp::Lerp), 3, T::Float, "lerp(a, b, w)", "Elementwise a + w * (b - a), exact at w = 0 and w = 1 (torch.lerp)."),
    op("fma", K::Ternary(TernaryOp::Fma), 3, T::Float, "fma(a, b, c)", "Elementwise a * b + c rounded once (fused multiply-add)."),
    // Random numbers (issue 33): a counter-based generator, the same in the kernel, the float64
    // reference and the torch twin.
    op("rand", K::Random(TernaryOp::Rand), 3, T::Random, "rand(x, seed, offset)", "An f32 tensor of x's shape (x's values are not read) of uniform numbers in [0, 1) from the counter-based generator Philox-4x32-10 (Random123): element i (the row-major linear index) is (w >> 8) * 2^-24, w word i & 3 (of the four) of the Philox call under the key seed and the counter (g lo, g hi, offset lo, offset hi) with g = i >> 2, so four consecutive elements share a call (a thread computes it once for the lanes of a loop that share it). seed and offset are integers or integer scalar inputs (input seed: i64), read as i64. Each element's value depends on seed, offset and its index only, never on the schedule, and the float64 reference computes it exactly, so a dropout validates: y = where(rand(x, seed, offset) < p, 0.0, x / (1 - p)). Not torch.rand's stream (its curand Philox shares one call among four elements of a launch's threads, so its stream depends on the launch); the torch twin computes this generator in torch int64 ops."),
    op("randn", K::Random(TernaryOp::RandN), 3, T::Random, "randn(x, seed, offset)", "An f32 tensor of x's shape of standard normal numbers from the same generator as rand, by Box-Muller of two words: element i reads words a = 2 (i & 1) and a + 1 of the call g = i >> 1 (so two consecutive elements share a call), u1 = ((w_a >> 8) + 1) * 2^-24 in (0, 1], u2 = (w_(a+1) >> 8) * 2^-24, sqrt(-2 ln u1) * cos(2 pi u2). The kernel computes it in f32 (logf, sqrtf, cospif), the reference in float64: equal to f32 rounding."),
    OpDef {
        named: &["axis", "axes"],
        ..op("sum", K::Reduce(ReduceOp::Sum), 1, T::Float, "sum(x, axis=1) | sum(x, axis=[0, 1])", "The sum over the listed axes (a reduction: the result has those axes removed; integers and bool sum in f32). A product of two widened operands and scales constant along the summed axis k, written as a user dequantizes (`sum(cast(a, f32) * sa_k * (cast(b, f32) * sb_k), axis=k)`, each scale a number, a scalar input or `broadcast(x, axis=k)`, directly or through names only the product reads), is summed unscaled and then multiplied by the scales (x for broadcast(x, axis=k)) in a new tensor `<sum>_scaled` that the sum's readers read: the epilogue of a tensor-core product (examples/matmul/step16_fp8.hf). A scale that varies along k stays in the product, computed as written; in a tensor-core tile, one constant along blocks of k (`expand_blocks`, examples/matmul/step18_fp8_block.hf) scales each block's sum into the accumulator, another is an error.")
    },
    OpDef {
        named: &["axis", "axes"],
        ..op("prod", K::Reduce(ReduceOp::Prod), 1, T::Float, "prod(x, axis=1) | prod(x, axis=[0, 1])", "The product over the listed axes (1 over no elements, as torch; i32 and bool multiply in f32).")
    },
    OpDef {
        named: &["axis", "axes"],
        ..op("any", K::Reduce(ReduceOp::Any), 1, T::Logical, "any(x, axis=1)", "Is any element over the listed axes non-zero (a bool; NaN is non-zero; false over no elements, as torch.any).")
    },
    OpDef {
        named: &["axis", "axes"],
        ..op("all", K::Reduce(ReduceOp::All), 1, T::Logical, "all(x, axis=1)", "Is every element over the listed axes non-zero (a bool; true over no elements, as torch.all).")
    },
    OpDef {
        named: &["axis", "axes"],
        ..op("mean", K::Composite(CompositeOp::Mean), 1, T::Float, "mean(x, axis=1) | mean(x, axis=[0, 1])", "The mean over the listed axes: their sum divided by the number of elements reduced, read at run time for symbolic sizes (i32 and bool in f32; NaN over no elements, as torch.mean). Like sum, a half input gives f32 (cast it back).")
    },
    OpDef {
        named: &["axis", "axes", "correction"],
        ..op("var", K::Composite(CompositeOp::Var), 1, T::Float, "var(x, axis=1) | var(x, axis=1, correction=0)", "The variance over the listed axes, sum((x - mean)^2) / (n - correction), in two passes (the mean, then the squared deviations: stable, and each a plain reduction the schedule parallelises), or in one with the schedule's welford(v) (Welford's running statistics per thread, Chan's combine across threads). correction=1 (Bessel's, the default) or any number >= 0, as torch.var; n <= correction gives inf or NaN, as torch. Half inputs give f32.")
    },
    OpDef {
        named: &["axis", "axes", "correction"],
        ..op("var_mean", K::VarMean(CompositeOp::Var), 1, T::Float, "var_mean(x, axis=1) | var_mean(x, axis=1, correction=0)", "The variance and the mean over the listed axes, assigned to two names, v, m = var_mean(x, axis=1) (torch.var_mean): the mean as `mean` computes it, and the variance as `var` does from that mean (one sum for both; correction as var's). Half inputs give f32.")
    },
    OpDef {
        named: &["axis", "axes"],
        ..op("logsumexp", K::Composite(CompositeOp::LogSumExp), 1, T::Float, "logsumexp(x, axis=1)", "log(sum(exp(x))) over the listed axes in the stable form m + log(sum(exp(x - m))), m the maximum (an infinite m is replaced by 0, as torch.logsumexp). Half inputs give f32.")
    },
    OpDef {
        named: &["axis"],
        ..op("argmax", K::Composite(CompositeOp::ArgMax), 1, T::Index, "argmax(x, axis=1)", "The index of the maximum along one axis, an i32 (torch.argmax gives int64): the first occurrence on ties and the first NaN when there is one, as torch; the axis's extent must stay below 2^30.")
    },
    OpDef {
        named: &["axis"],
        ..op("argmin", K::Composite(CompositeOp::ArgMin), 1, T::Index, "argmin(x, axis=1)", "The index of the minimum along one axis, an i32: the first occurrence on ties and the first NaN when there is one, as torch.argmin.")
    },
    OpDef {
        named: &["axis"],
        ..op("iota", K::Iota, 1, T::Index, "iota(x, axis=1)", "The index along one axis of x's shape, an i32, with extent 1 on x's other axes (torch.arange(n).view(1, -1)); x's values are not read. Row and column indices for masks: where(iota(x, axis=1) <= broadcast(limit, axis=1), x, 0.0).")
    },
    OpDef {
        named: &["dtype"],
        ..op("full", K::Full, 2, T::Cast, "full([M, 4096], 0.5) | full([M, N], 1, dtype=bf16)", "A tensor of the listed extents (size symbols and integers) holding one number, as torch.full: f32 for a number with a fraction, i32 for an integer, or the dtype given.")
    },
    OpDef {
        named: &["axis", "axes"],
        ..op("broadcast", K::Broadcast, 1, T::Same, "broadcast(x, axis=1)", "Inserts new axes at the listed positions of the result, so x lines up with a tensor of higher rank (e.g. a row vector added to every row).")
    },
    OpDef {
        named: &["saturate"],
        ..op("cast", K::Cast, 2, T::Cast, "cast(x, bf16) | cast(x, f8e4m3, saturate=true)", "Converts to a dtype as torch's .to does: floats round to nearest even (to f8e4m3 a magnitude beyond 464 is NaN, to f8e5m2 beyond 61440 an infinity); to an integer NaN is 0, and a float truncates and saturates (to u8: wraps modulo 256); integers to a narrower integer wrap; to bool non-zero is true. `saturate=true` clamps to the type's largest finite value first (NaN stays NaN), as x.clamp(-448, 448).to(torch.float8_e4m3fn).")
    },
    OpDef {
        aliases: &["copy"],
        ..op("set", K::Set, 1, T::Same, "set(x) | copy(x)", "A copy of x.")
    },
    // Views.
    OpDef {
        named: &["dims"],
        ..op("permute", K::Permute, 1, T::Same, "permute(x, dims=[1, 0])", "A view with the axes reordered: axis k of the result is axis dims[k] of x (torch's x.permute). Every axis of a tensor gets a loop of its own, so a tensor cannot meet its own permutation in one op (x + transpose(x)).")
    },
    op("transpose", K::Transpose, 3, T::Same, "transpose(x, 0, 1)", "A view with two axes swapped (torch's x.transpose(a, b)); a permute."),
    OpDef {
        named: &["shape"],
        ..op("expand", K::Expand, 1, T::Same, "expand(x, shape=[M, N])", "A view with x's broadcast axes (from broadcast) given extents: each entry a size symbol or an integer; the other axes keep theirs and must be given their own extent (torch's x.expand).")
    },
    OpDef {
        named: &["axis", "start", "stop", "step"],
        ..op("slice", K::Slice, 1, T::Same, "slice(x, axis=1, start=0, stop=64, step=1)", "A view of the indices start, start + step, ... below stop along one axis of x (torch's x[:, start:stop:step]). Integers; a negative start or stop counts from the end, an omitted start is 0 and stop the extent. The extent of the result is written as the input's less the constants (N - 2 for start=1, stop=-1); with a size symbol the runner checks before a launch that the slice is not empty. The operand may be computed or another view: the kernel recomputes its elementwise ops, casts and views from the fusion inputs at the moved indices (rotate_half: cat(-slice(x, axis=1, start=64), slice(x, axis=1, stop=64), axis=1)); a reduction's result, an iota or a full is read where it is computed, so the view may not move its axes (a per-row statistic broadcast along the moved axis is fine).")
    },
    OpDef {
        named: &["axis", "before", "after", "value"],
        ..op("pad", K::Pad, 1, T::Same, "pad(x, axis=1, before=1, after=2, value=0)", "x widened along one axis by `before` and `after` elements (integers >= 0) holding `value` (0 when not given): torch's F.pad. The extent of the result is the input's plus both (N + 3). The operand may be computed or another view: the kernel recomputes its elementwise ops, casts and views from the fusion inputs at the moved indices (rotate_half: cat(-slice(x, axis=1, start=64), slice(x, axis=1, stop=64), axis=1)); a reduction's result, an iota or a full is read where it is computed, so the view may not move its axes (a per-row statistic broadcast along the moved axis is fine).")
    },
    OpDef {
        named: &["axis"],
        ..op("cat", K::Cat, 2, T::Same, "cat(a, b, axis=1)", "Two tensors of one dtype end to end along one axis (torch.cat((a, b), dim)): the other axes must have equal extents; the result's extent along the axis is the sum (N + K). The operand may be computed or another view: the kernel recomputes its elementwise ops, casts and views from the fusion inputs at the moved indices (rotate_half: cat(-slice(x, axis=1, start=64), slice(x, axis=1, stop=64), axis=1)); a reduction's result, an iota or a full is read where it is computed, so the view may not move its axes (a per-row statistic broadcast along the moved axis is fine). In a vectorized loop whose vectors never straddle the two pieces (the first's extent a multiple of the vector, known at compile time), each piece is read with one aligned vector load (pass view_vectors).")
    },
    OpDef {
        named: &["block", "shape"],
        ..op("expand_blocks", K::ExpandBlocks, 1, T::Same, "expand_blocks(sa, block=[1, 128], shape=[M, K])", "A fusion input with each element repeated over a block: element [i, j] of the result is x[i / 128, j / 128] for block=[128, 128] (torch's x.repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]). Block scales of FP8 products are written with it (DeepSeek-V3: 1 x 128 activation blocks, 128 x 128 weight blocks). Each block entry is a positive integer; each shape entry a size symbol or a positive integer, equal to x's extent where the block is 1; the runner checks before a launch that x covers the shape (ceilDiv(K, 128) <= x's extent).")
    },
    // Matrix products (issue 33): each expands to the sum of broadcast products.
    op("matmul", K::MatMul, 2, T::Float, "matmul(a, b)", "The matrix product of a [M, K] and b [K, N] (torch.matmul, a @ b; batched when both have the same leading axes): written out as sum(broadcast(a, axis=2) * broadcast(b, axis=0), axis=1), the form the tensor-core schedules lower; its tensors are named as a nested expression's (`c = matmul(a, b)`: c is the sum, c_broadcast, c_broadcast2 and c_mul its operands and product, for a schedule to name). Half and 8-bit float operands are widened to f32 first and the result is the f32 sum, as sum's is: cast it back (cast(matmul(a, b), bf16) is torch's a @ b in bf16). Floating-point operands only."),
    op("linear", K::Linear, 3, T::Float, "linear(x, w) | linear(x, w, bias)", "x [M, K] times the weight w [N, K] transposed, plus bias [N] when given (torch.nn.functional.linear; x may have more leading axes): written out as sum(broadcast(x, axis=1) * broadcast(w, axis=0), axis=2) + broadcast(bias, axis=0), w read K-major as the tensor-core schedules want it (examples/matmul/step1_one_warp_group.hf). Half and 8-bit float operands are widened to f32 and the result is f32, as matmul's: cast it back."),
    // Indexing (issue 33): indices loaded from data.
    OpDef {
        aliases: &["take_along_axis"],
        named: &["axis"],
        ..op("gather", K::Gather, 2, T::Same, "gather(x, index, axis=1) | take_along_axis(x, index, axis=1)", "Elements of x picked along one axis by an integer tensor of the result's shape: out[i, j] = x[i, index[i, j]] for axis=1 (torch.gather(x, 1, index), numpy's take_along_axis); index's other extents equal x's (broadcast(labels, axis=1) picks one element per row: a cross-entropy's label logit). index is read from a fusion input (through copies and broadcasts), i32, i64 or an 8-bit integer; x may be computed (recomputed at the picked index). An index outside [0, n) reads the nearest end, x[0] or x[n - 1] (clamped, so no load leaves x; torch raises an error instead).")
    },
    op("index_select", K::IndexSelect, 3, T::Same, "index_select(x, 0, index)", "Slices of x along one axis picked by a 1-D integer tensor: out[i, :] = x[index[i], :] for axis 0 (torch.index_select(x, 0, index): an embedding lookup). The axis is the second operand, a number; index is read from a fusion input (through copies), i32, i64 or an 8-bit integer; x may be computed. An index outside [0, n) reads the nearest end (clamped: no load leaves x; torch raises an error instead)."),
    op("reshape", K::Reshape, 2, T::Same, "reshape(x, [M, 8, 64])", "x with other extents and the same elements in row-major order (torch's x.reshape on a contiguous tensor: split and merge of axes). Each extent is a size symbol, a positive integer or a product of them (H * D); the element counts must be equal as products of the same symbols and integers. A reshape moves every axis: x may be computed (recomputed from the fusion inputs), but not from a reduction's result."),
];

/// The op called `name` (or one of its aliases).
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    OPS.iter()
        .find(|d| d.name == name || d.aliases.contains(&name))
}

fn lookup_kind(kind: OpKind) -> &'static OpDef {
    OPS.iter()
        .find(|d| d.kind == kind)
        .expect("every op has an entry in OPS (checked by a test)")
}

/// The names of every op, for "expected one of" messages.
pub fn names() -> String {
    OPS.iter().map(|d| d.name).collect::<Vec<_>>().join(", ")
}

/// The promoted type of an op's operands: `tensors` are the dtypes of its tensor operands
/// (scalar inputs included), `literals` its numbers. Half types compute in f32; a literal with
/// a fraction (or an infinity or NaN) makes integer and bool operands compute in f32, and an
/// integral one makes bool operands compute in i32 (torch: a Python float against an integer
/// tensor gives the default float type, an int against a bool tensor an integer).
pub fn promote(tensors: &[DType], literals: &[f64]) -> DType {
    let mut d = tensors
        .iter()
        .map(|t| t.compute())
        .max()
        .unwrap_or(DType::Bool);
    for &v in literals {
        if !v.is_finite() || v.fract() != 0.0 {
            if !d.is_float() {
                d = DType::F32;
            }
        } else if d == DType::Bool {
            d = DType::I32;
        }
    }
    d
}

/// The type an op computes in and the type of its result, by its typing rule: `Err` says why
/// the operands are not allowed (the caller adds the op's name and location).
pub fn result_type(
    typing: Typing,
    tensors: &[DType],
    literals: &[f64],
) -> Result<(DType, DType), String> {
    let computes: Vec<DType> = tensors.iter().map(|t| t.compute()).collect();
    if computes.contains(&DType::U8) && computes.contains(&DType::I8) {
        return Err("mixes u8 and i8 operands, which have no common type here (torch promotes them to int16, which hopfuse has not): cast one of them first (cast(x, i32))".into());
    }
    let d = promote(tensors, literals);
    match typing {
        Typing::Numeric if d == DType::Bool => Err(
            "needs numbers, and its operands are bool (cast(x, i32) or cast(x, f32) first; logical_and/or/xor combine bools)".into(),
        ),
        Typing::Numeric | Typing::Same => Ok((d, d)),
        Typing::Float => {
            let f = if d.is_float() { d } else { DType::F32 };
            Ok((f, f))
        }
        Typing::Compare => Ok((d, DType::Bool)),
        Typing::Logical => Ok((DType::Bool, DType::Bool)),
        Typing::Bitwise if d.is_float() => Err(format!(
            "works on integer or bool operands, and its operands compute in {d} (cast(x, i32) first)"
        )),
        Typing::Bitwise => Ok((d, d)),
        Typing::Integer if d != DType::I32 => Err(format!(
            "works on i32 operands, and its operands compute in {d} (cast(x, i32) first)"
        )),
        Typing::Integer => Ok((d, d)),
        // The condition is the first operand; the rule is for the two values.
        Typing::Select => {
            let v = if d == DType::Bool && tensors.is_empty() { DType::I32 } else { d };
            Ok((v, v))
        }
        Typing::Cast => unreachable!("cast's type is its argument"),
        Typing::Index => Ok((DType::I32, DType::I32)),
        Typing::Random => match tensors.iter().find(|t| !t.is_integer()) {
            Some(t) => Err(format!(
                "takes an integer seed and offset (i32 or i64 scalar inputs, or integers), not {t}"
            )),
            None if literals.iter().any(|v| v.fract() != 0.0) => {
                Err("takes an integer seed and offset, not a number with a fraction".into())
            }
            None => Ok((DType::F32, DType::F32)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp2_ftz_flushes_only_subnormal_results() {
        let e = |x: f64| UnaryOp::Exp2Ftz.eval(x);
        assert_eq!(e(1.0), 2.0);
        assert_eq!(e(-126.0), f64::from(f32::MIN_POSITIVE));
        assert_eq!(e(-126.5), 0.0);
        assert_eq!(e(f64::NEG_INFINITY), 0.0);
        assert!(e(f64::NAN).is_nan());
        assert_eq!(UnaryOp::Exp2Ftz.name(), "exp2_ftz");
        assert_eq!(UnaryOp::Exp2Ftz.def().name, "exp2");
    }

    #[test]
    fn tanh_abs_is_tanh_by_another_name() {
        assert_eq!(UnaryOp::TanhAbs.name(), "tanh_abs");
        assert_eq!(UnaryOp::TanhAbs.def().name, "tanh");
        assert_eq!(UnaryOp::TanhAbs.eval(0.5), 0.5f64.tanh());
        assert_eq!(UnaryOp::TanhApprox.name(), "tanh_approx");
        assert_eq!(UnaryOp::TanhApprox.def().name, "tanh");
        assert_eq!(UnaryOp::TanhApprox.eval(0.5), 0.5f64.tanh());
    }

    #[test]
    fn every_op_has_one_entry_and_every_entry_is_documented() {
        for u in UnaryOp::ALL {
            assert_eq!(
                OPS.iter().filter(|d| d.kind == OpKind::Unary(u)).count(),
                usize::from(!matches!(
                    u,
                    UnaryOp::GeluTanh
                        | UnaryOp::Exp2Ftz
                        | UnaryOp::Exp2Fma
                        | UnaryOp::TanhAbs
                        | UnaryOp::TanhApprox
                )),
                "{u:?}"
            );
            let _ = u.def();
        }
        for b in BinaryOp::ALL {
            let _ = b.def();
        }
        for t in TernaryOp::ALL {
            assert_eq!(t.def().arity, 3);
        }
        let mut seen = std::collections::HashSet::new();
        for d in OPS {
            for n in std::iter::once(d.name).chain(d.aliases.iter().copied()) {
                assert!(seen.insert(n), "{n} twice");
            }
            assert!(d.doc.ends_with('.'), "{}", d.name);
            assert!(d.signature.starts_with(d.name), "{}", d.name);
        }
    }

    #[test]
    fn torch_semantics_of_the_edge_cases() {
        assert_eq!(UnaryOp::Round.eval(2.5), 2.0);
        assert_eq!(UnaryOp::Round.eval(-0.5), -0.0);
        assert_eq!(UnaryOp::Round.eval(3.5), 4.0);
        assert_eq!(UnaryOp::Sign.eval(f64::NAN), 0.0);
        assert_eq!(UnaryOp::Sign.eval(-3.0), -1.0);
        assert_eq!(BinaryOp::Remainder.eval(-7.0, 3.0), 2.0);
        assert_eq!(BinaryOp::Remainder.eval(7.0, -3.0), -2.0);
        assert_eq!(BinaryOp::Fmod.eval(-7.0, 3.0), -1.0);
        assert_eq!(BinaryOp::ShiftLeft.eval(1.0, 33.0), 0.0);
        assert_eq!(BinaryOp::ShiftLeft.eval(1.0, 31.0), i32::MIN as f64);
        assert_eq!(BinaryOp::ShiftRight.eval(-8.0, 40.0), -1.0);
        assert_eq!(BinaryOp::ShiftRight.eval(-8.0, 1.0), -4.0);
        assert_eq!(UnaryOp::BitwiseNot.eval(5.0), -6.0);
        assert_eq!(BinaryOp::Eq.eval(f64::NAN, f64::NAN), 0.0);
        assert!(TernaryOp::Clamp.eval(f64::NAN, 0.0, 1.0).is_nan());
        assert_eq!(TernaryOp::Clamp.eval(5.0, 2.0, 1.0), 1.0);
        // max, min, relu and clamp propagate NaN from any operand, as torch's do.
        for (a, b) in [
            (f64::NAN, 1.0),
            (1.0, f64::NAN),
            (f64::NAN, f64::NEG_INFINITY),
        ] {
            assert!(BinaryOp::Max.eval(a, b).is_nan(), "max({a}, {b})");
            assert!(BinaryOp::Min.eval(a, b).is_nan(), "min({a}, {b})");
        }
        assert_eq!(BinaryOp::Max.eval(-1.0, 2.0), 2.0);
        assert_eq!(BinaryOp::Min.eval(-1.0, 2.0), -1.0);
        assert!(UnaryOp::Relu.eval(f64::NAN).is_nan());
        assert_eq!(UnaryOp::Relu.eval(-2.0), 0.0);
        assert!(TernaryOp::Clamp.eval(0.5, f64::NAN, 1.0).is_nan());
        assert!(TernaryOp::Clamp.eval(0.5, 0.0, f64::NAN).is_nan());
        assert_eq!(TernaryOp::Lerp.eval(3.0, 7.0, 1.0), 7.0);
        assert_eq!(UnaryOp::Softplus.eval(30.0), 30.0);
        assert!((UnaryOp::Gelu.eval(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((UnaryOp::GeluTanh.eval(1.0) - 0.841_191_990_607_477_2).abs() < 1e-12);
        assert_eq!(UnaryOp::LogicalNot.eval(f64::NAN), 0.0);
    }

    #[test]
    fn promotion_follows_torch() {
        use DType::*;
        assert_eq!(promote(&[I32], &[0.5]), F32);
        assert_eq!(promote(&[Bool], &[2.0]), I32);
        assert_eq!(promote(&[Bool, F32], &[]), F32);
        assert_eq!(promote(&[BF16, F16], &[]), F32);
        assert_eq!(result_type(Typing::Float, &[I32], &[]), Ok((F32, F32)));
        assert_eq!(
            result_type(Typing::Compare, &[I32], &[1.0]),
            Ok((I32, Bool))
        );
        assert!(result_type(Typing::Bitwise, &[F32], &[]).is_err());
        assert!(result_type(Typing::Numeric, &[Bool, Bool], &[]).is_err());
        assert!(result_type(Typing::Integer, &[Bool], &[]).is_err());
        // The new integer and 8-bit float types.
        assert_eq!(promote(&[U8, I32], &[]), I32);
        assert_eq!(promote(&[I8, I64], &[]), I64);
        assert_eq!(promote(&[I64, F8E4M3], &[]), F32);
        assert_eq!(promote(&[F8E5M2, F64], &[]), F64);
        assert_eq!(promote(&[U8], &[3.0]), U8);
        assert_eq!(promote(&[I64], &[0.5]), F32);
        assert_eq!(result_type(Typing::Numeric, &[U8, U8], &[]), Ok((U8, U8)));
        assert_eq!(result_type(Typing::Float, &[F8E4M3], &[]), Ok((F32, F32)));
        assert_eq!(
            result_type(Typing::Bitwise, &[I64, I8], &[]),
            Ok((I64, I64))
        );
        let mixed = result_type(Typing::Numeric, &[U8, I8], &[]).unwrap_err();
        assert!(mixed.contains("int16"), "{mixed}");
        assert!(result_type(Typing::Integer, &[I64], &[]).is_err());
        assert_eq!(
            BinaryOp::BitwiseAnd.eval(-1.0, (1u64 << 40) as f64),
            (1u64 << 40) as f64
        );
        assert_eq!(UnaryOp::BitwiseNot.eval(5.0), -6.0);
    }
}
