//! Expressions: a value of the kernel IR as CUDA text with its type (conversions between
//! storage and arithmetic types, literals, unary and binary operations), for [`Emitter`].

use super::Emitter;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, TernaryOp, UnaryOp};
use crate::kir::Data;

impl Emitter<'_> {
    pub(super) fn conv(&mut self, e: String, from: DType, to: DType) -> String {
        if from == to {
            return e;
        }
        // Storage-only types reach anything else through float.
        match from {
            DType::BF16 => {
                self.uses.bf16 = true;
                return self.conv(format!("hf_bf16_to_float({e})"), DType::F32, to);
            }
            DType::F16 => {
                self.uses.f16 = true;
                return self.conv(format!("hf_f16_to_float({e})"), DType::F32, to);
            }
            DType::F8E4M3 | DType::F8E5M2 => {
                self.uses.fp8 = true;
                let f = format!("hf_{}_to_float({e})", fp8_name(from));
                return self.conv(f, DType::F32, to);
            }
            _ => {}
        }
        match to {
            DType::BF16 => {
                self.uses.bf16 = true;
                let f = self.conv(e, from, DType::F32);
                format!("hf_float_to_bf16({f})")
            }
            DType::F16 => {
                self.uses.f16 = true;
                let f = self.conv(e, from, DType::F32);
                format!("hf_float_to_f16({f})")
            }
            DType::F8E4M3 | DType::F8E5M2 => {
                self.uses.fp8 = true;
                let f = self.conv(e, from, DType::F32);
                format!("hf_float_to_{}({f})", fp8_name(to))
            }
            // Float to u8 goes through a 64-bit integer and wraps (c10's TypeCast.h); to i8 it
            // saturates, through int (whose conversion saturates and takes NaN to 0).
            DType::U8 if from.is_float() => {
                format!("static_cast<unsigned char>(static_cast<long long>({e}))")
            }
            DType::I8 if from.is_float() => {
                format!("static_cast<signed char>(max(-128, min(127, static_cast<int>({e}))))")
            }
            to => format!("static_cast<{}>({e})", to.cuda()),
        }
    }

    pub(super) fn literal(v: f64, d: DType) -> String {
        match d {
            DType::F32 | DType::BF16 | DType::F16 | DType::F8E4M3 | DType::F8E5M2 => {
                // Rounded to f32 first: a finite f64 beyond f32's range is an infinity here, and
                // must not print as `inff`.
                let f = v as f32;
                if f.is_nan() {
                    "__int_as_float(0x7fc00000)".into()
                } else if f.is_infinite() {
                    if f > 0.0 {
                        "__int_as_float(0x7f800000)"
                    } else {
                        "__int_as_float(0xff800000)"
                    }
                    .into()
                } else {
                    format!("{}f", crate::text::float_literal(f))
                }
            }
            DType::F64 => {
                if v.is_nan() {
                    "__longlong_as_double(0x7ff8000000000000LL)".into()
                } else if v.is_infinite() {
                    if v > 0.0 {
                        "__longlong_as_double(0x7ff0000000000000LL)"
                    } else {
                        "__longlong_as_double((long long)0xfff0000000000000ULL)"
                    }
                    .into()
                } else {
                    crate::text::float_literal(v)
                }
            }
            DType::I32 => {
                if v.is_infinite() {
                    if v > 0.0 {
                        "2147483647"
                    } else {
                        "(-2147483647 - 1)"
                    }
                    .into()
                } else {
                    format!("{}", v as i64 as i32)
                }
            }
            // An 8-bit value is written as an int (C computes in int).
            DType::I8 | DType::U8 => format!("{}", d.round(v) as i64),
            DType::I64 => {
                let i = d.round(v) as i64;
                if i == i64::MIN {
                    "(-9223372036854775807LL - 1)".into()
                } else {
                    format!("{i}LL")
                }
            }
            DType::Bool => (v != 0.0).to_string(),
        }
    }

    /// Emits a value and returns it with its type.
    pub(super) fn data(&mut self, d: &Data) -> (String, DType) {
        match d {
            Data::Read(a) => {
                let b = &self.k.buffers[a.buffer];
                let dtype = b.dtype;
                match super::l2_hint(b.l2) {
                    Some(p) => {
                        self.uses.l2_hint = true;
                        (format!("hf_ld_l2<{p}>(&{})", self.access(a)), dtype)
                    }
                    None => (self.access(a), dtype),
                }
            }
            Data::Param(n, dt) => (n.clone(), dt.compute()),
            Data::Literal(v, dt) => (Self::literal(*v, *dt), *dt),
            Data::Index(of, v) => {
                let v = v
                    .as_ref()
                    .expect("the indexing pass gives every index its value");
                let dtype = of.dtype();
                (
                    format!("static_cast<{}>({})", dtype.cuda(), self.val(v)),
                    dtype,
                )
            }
            Data::View(_, x) => self.data(x),
            Data::Cast(to, x) => {
                let (e, from) = self.data(x);
                (self.conv(e, from, *to), *to)
            }
            Data::Unary(op, dt, x) => {
                let (e, from) = self.data(x);
                let x = self.conv(e, from, *dt);
                wrap_small_integer(self.unary(*op, *dt, x))
            }
            Data::Binary(op, dt, a, b) => {
                let (ea, fa) = self.data(a);
                let (eb, fb) = self.data(b);
                let (x, y) = (self.conv(ea, fa, *dt), self.conv(eb, fb, *dt));
                wrap_small_integer(self.binary(*op, *dt, x, y))
            }
            Data::Ternary(op, dt, xs) => {
                let [a, b, c] = &**xs;
                let (ea, fa) = self.data(a);
                let (eb, fb) = self.data(b);
                let (ec, fc) = self.data(c);
                // `where` tests its condition in its own type, the generator reads i64.
                let (x, y, z) = (
                    self.conv(ea, fa, op.operand_type(0, *dt)),
                    self.conv(eb, fb, op.operand_type(1, *dt)),
                    self.conv(ec, fc, op.operand_type(2, *dt)),
                );
                let f64t = *dt == DType::F64;
                let s = match op {
                    TernaryOp::Where => format!("({x} ? {y} : {z})"),
                    TernaryOp::Fma => {
                        format!("{}({x}, {y}, {z})", if f64t { "fma" } else { "fmaf" })
                    }
                    TernaryOp::Clamp => {
                        self.uses.math.insert("maximum");
                        self.uses.math.insert("clamp");
                        if *dt == DType::I64 {
                            self.uses.math.insert("clamp_i64");
                        }
                        format!("hf_clamp({x}, {y}, {z})")
                    }
                    TernaryOp::Lerp => {
                        self.uses.math.insert("lerp");
                        format!("hf_lerp({x}, {y}, {z})")
                    }
                    TernaryOp::Rand | TernaryOp::RandN => {
                        self.uses.math.insert("philox");
                        let f = if *op == TernaryOp::Rand {
                            "hf_rand"
                        } else {
                            "hf_randn"
                        };
                        // In a loop, through the loop's memo of the last call (`random.rs`).
                        let s = match self.philox_memo(d) {
                            Some(memo) => format!("{f}_memo({memo}, {x}, {y}, {z})"),
                            None => format!("{f}({x}, {y}, {z})"),
                        };
                        return (s, DType::F32);
                    }
                };
                (s, *dt)
            }
        }
    }

    /// `op(x)` computed in `dt` (x already converted to it), with the result's type.
    fn unary(&mut self, op: UnaryOp, dt: DType, x: String) -> (String, DType) {
        let f64t = dt == DType::F64;
        // The C math function of this float type (`expf` or `exp`).
        let math = |name: &str| {
            if f64t {
                format!("{name}({x})")
            } else {
                format!("{name}f({x})")
            }
        };
        let is_float = dt.is_float();
        let s = match op {
            UnaryOp::Neg => format!("-({x})"),
            UnaryOp::Abs if dt == DType::I64 => format!("llabs({x})"),
            UnaryOp::Abs if !is_float => format!("abs({x})"),
            UnaryOp::Relu if !is_float => format!("max({x}, {})", Self::literal(0.0, dt)),
            UnaryOp::Abs => math("fabs"),
            UnaryOp::Exp => math("exp"),
            UnaryOp::Sqrt => math("sqrt"),
            UnaryOp::Rsqrt => math("rsqrt"),
            UnaryOp::Tanh => math("tanh"),
            UnaryOp::Log => math("log"),
            UnaryOp::Log2 => math("log2"),
            UnaryOp::Log1p => math("log1p"),
            UnaryOp::Exp2 => math("exp2"),
            // Made in f32 only (pass online_softmax); f64 keeps the precise form.
            UnaryOp::TanhAbs if f64t => math("tanh"),
            UnaryOp::TanhAbs => {
                self.uses.math.insert("tanh_abs");
                format!("hf_tanh_abs({x})")
            }
            UnaryOp::TanhApprox if f64t => math("tanh"),
            UnaryOp::TanhApprox => {
                self.uses.math.insert("tanh_approx");
                format!("hf_tanh_approx({x})")
            }
            // f64 has no flushing form (the passes make this op in f32 only).
            UnaryOp::Exp2Ftz if f64t => math("exp2"),
            UnaryOp::Exp2Ftz => {
                self.uses.math.insert("exp2_ftz");
                format!("hf_exp2_ftz({x})")
            }
            UnaryOp::Exp2Fma if f64t => math("exp2"),
            UnaryOp::Exp2Fma => {
                self.uses.math.insert("exp2_fma");
                format!("hf_exp2_fma({x})")
            }
            UnaryOp::Expm1 => math("expm1"),
            UnaryOp::Erf => math("erf"),
            UnaryOp::Sin => math("sin"),
            UnaryOp::Cos => math("cos"),
            // Integers are their own floor, ceiling, rounding and truncation.
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc if !is_float => {
                format!("({x})")
            }
            UnaryOp::Floor => math("floor"),
            UnaryOp::Ceil => math("ceil"),
            // rint rounds to nearest even in the default rounding mode, as torch.round.
            UnaryOp::Round => math("rint"),
            UnaryOp::Trunc => math("trunc"),
            UnaryOp::Relu => {
                self.uses.math.insert("maximum");
                format!("hf_maximum({x}, {})", Self::literal(0.0, dt))
            }
            UnaryOp::Sigmoid => {
                let one = Self::literal(1.0, dt);
                format!(
                    "{one} / ({one} + {}(-({x})))",
                    if f64t { "exp" } else { "expf" }
                )
            }
            UnaryOp::Reciprocal => format!("({} / ({x}))", Self::literal(1.0, dt)),
            UnaryOp::Sign
            | UnaryOp::Silu
            | UnaryOp::Gelu
            | UnaryOp::GeluTanh
            | UnaryOp::Softplus => {
                let helper = match op {
                    UnaryOp::Sign => "sign",
                    UnaryOp::Silu => "silu",
                    UnaryOp::Gelu => "gelu",
                    UnaryOp::GeluTanh => "gelu_tanh",
                    _ => "softplus",
                };
                self.uses.math.insert(helper);
                if op == UnaryOp::Sign && dt == DType::I64 {
                    self.uses.math.insert("sign_i64");
                }
                format!("hf_{helper}({x})")
            }
            UnaryOp::IsNan if is_float => format!("isnan({x})"),
            UnaryOp::IsInf if is_float => format!("isinf({x})"),
            // No integer is NaN or infinite.
            UnaryOp::IsNan | UnaryOp::IsInf => "false".into(),
            UnaryOp::LogicalNot => format!("!({x})"),
            UnaryOp::BitwiseNot if dt == DType::Bool => format!("!({x})"),
            UnaryOp::BitwiseNot => format!("~({x})"),
        };
        let result = match op {
            UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::LogicalNot => DType::Bool,
            _ => dt,
        };
        (s, result)
    }

    /// `op(x, y)` computed in `dt` (both converted to it), with the result's type.
    fn binary(&mut self, op: BinaryOp, dt: DType, x: String, y: String) -> (String, DType) {
        let f64t = dt == DType::F64;
        let is_float = dt.is_float();
        let math = |name: &str| format!("{name}{}({x}, {y})", if f64t { "" } else { "f" });
        let s = match op {
            BinaryOp::Add => format!("({x} + {y})"),
            BinaryOp::Sub => format!("({x} - {y})"),
            BinaryOp::Mul => format!("({x} * {y})"),
            BinaryOp::Div => format!("({x} / {y})"),
            BinaryOp::Max if !is_float => format!("max({x}, {y})"),
            BinaryOp::Min if !is_float => format!("min({x}, {y})"),
            BinaryOp::Max | BinaryOp::Min => {
                self.uses.math.insert("maximum");
                let f = if op == BinaryOp::Max {
                    "hf_maximum"
                } else {
                    "hf_minimum"
                };
                format!("{f}({x}, {y})")
            }
            BinaryOp::Pow => math("pow"),
            BinaryOp::Fmod if !is_float => format!("({x} % {y})"),
            BinaryOp::Fmod => math("fmod"),
            BinaryOp::Remainder => {
                self.uses.math.insert("remainder");
                if dt == DType::I64 {
                    self.uses.math.insert("remainder_i64");
                }
                format!("hf_remainder({x}, {y})")
            }
            BinaryOp::Lt => format!("({x} < {y})"),
            BinaryOp::Le => format!("({x} <= {y})"),
            BinaryOp::Gt => format!("({x} > {y})"),
            BinaryOp::Ge => format!("({x} >= {y})"),
            BinaryOp::Eq => format!("({x} == {y})"),
            BinaryOp::Ne => format!("({x} != {y})"),
            BinaryOp::LogicalAnd => format!("({x} && {y})"),
            BinaryOp::LogicalOr => format!("({x} || {y})"),
            BinaryOp::LogicalXor => format!("({x} != {y})"),
            BinaryOp::BitwiseAnd => format!("({x} & {y})"),
            BinaryOp::BitwiseOr => format!("({x} | {y})"),
            BinaryOp::BitwiseXor => format!("({x} ^ {y})"),
            BinaryOp::ShiftLeft | BinaryOp::ShiftRight => {
                self.uses.math.insert("shift");
                let f = if op == BinaryOp::ShiftLeft {
                    "hf_shl"
                } else {
                    "hf_shr"
                };
                format!("{f}({x}, {y})")
            }
        };
        (s, if op.gives_bool() { DType::Bool } else { dt })
    }
}

/// The name of an 8-bit float type in the prelude's helpers (`hf_float_to_e4m3`).
fn fp8_name(d: DType) -> &'static str {
    match d {
        DType::F8E5M2 => "e5m2",
        _ => "e4m3",
    }
}

/// An 8-bit integer result converted back to its type: C computes `a + b` of two `unsigned
/// char`s in int, torch in uint8 (wrapping), and the next op must see the wrapped value.
fn wrap_small_integer((s, d): (String, DType)) -> (String, DType) {
    match d {
        DType::I8 | DType::U8 => (format!("static_cast<{}>({s})", d.cuda()), d),
        _ => (s, d),
    }
}
