//! Expressions: a value of the kernel IR as CUDA text with its type (conversions between
//! storage and arithmetic types, literals, unary and binary operations), for [`Emitter`].

use super::Emitter;
use crate::dtype::DType;
use crate::fusion::{BinaryOp, UnaryOp};
use crate::kir::Data;

impl Emitter<'_> {
    pub(super) fn conv(&mut self, e: String, from: DType, to: DType) -> String {
        if from == to {
            return e;
        }
        match from {
            DType::BF16 => {
                self.uses.bf16 = true;
                return self.conv(format!("hf_bf16_to_float({e})"), DType::F32, to);
            }
            DType::F16 => {
                self.uses.f16 = true;
                return self.conv(format!("hf_f16_to_float({e})"), DType::F32, to);
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
            to => format!("static_cast<{}>({e})", to.cuda()),
        }
    }

    pub(super) fn literal(v: f64, d: DType) -> String {
        match d {
            DType::F32 | DType::BF16 | DType::F16 => {
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
            DType::Bool => (v != 0.0).to_string(),
        }
    }

    /// Emits a value and returns it with its type.
    pub(super) fn data(&mut self, d: &Data) -> (String, DType) {
        match d {
            Data::Read(a) => (self.access(a), self.k.buffers[a.buffer].dtype),
            Data::Param(n, dt) => (n.clone(), dt.compute()),
            Data::Literal(v, dt) => (Self::literal(*v, *dt), *dt),
            Data::Cast(to, x) => {
                let (e, from) = self.data(x);
                (self.conv(e, from, *to), *to)
            }
            Data::Unary(op, dt, x) => {
                let (e, from) = self.data(x);
                let x = self.conv(e, from, *dt);
                let f64t = *dt == DType::F64;
                let s = match (op, dt) {
                    (UnaryOp::Neg, _) => format!("-({x})"),
                    (UnaryOp::Abs, DType::I32) => format!("abs({x})"),
                    (UnaryOp::Relu, DType::I32) => format!("max({x}, 0)"),
                    (UnaryOp::Exp, _) => format!("{}({x})", if f64t { "exp" } else { "expf" }),
                    (UnaryOp::Abs, _) => format!("{}({x})", if f64t { "fabs" } else { "fabsf" }),
                    (UnaryOp::Sqrt, _) => format!("{}({x})", if f64t { "sqrt" } else { "sqrtf" }),
                    (UnaryOp::Rsqrt, _) => {
                        format!("{}({x})", if f64t { "rsqrt" } else { "rsqrtf" })
                    }
                    (UnaryOp::Tanh, _) => format!("{}({x})", if f64t { "tanh" } else { "tanhf" }),
                    (UnaryOp::Relu, _) => {
                        format!(
                            "{}({x}, {})",
                            if f64t { "fmax" } else { "fmaxf" },
                            Self::literal(0.0, *dt)
                        )
                    }
                    (UnaryOp::Sigmoid, _) => {
                        let one = Self::literal(1.0, *dt);
                        format!(
                            "{one} / ({one} + {}(-({x})))",
                            if f64t { "exp" } else { "expf" }
                        )
                    }
                };
                (s, *dt)
            }
            Data::Binary(op, dt, a, b) => {
                let (ea, fa) = self.data(a);
                let (eb, fb) = self.data(b);
                let (x, y) = (self.conv(ea, fa, *dt), self.conv(eb, fb, *dt));
                let f64t = *dt == DType::F64;
                let s = match op {
                    BinaryOp::Add => format!("({x} + {y})"),
                    BinaryOp::Sub => format!("({x} - {y})"),
                    BinaryOp::Mul => format!("({x} * {y})"),
                    BinaryOp::Div => format!("({x} / {y})"),
                    BinaryOp::Max if *dt == DType::I32 => format!("max({x}, {y})"),
                    BinaryOp::Min if *dt == DType::I32 => format!("min({x}, {y})"),
                    BinaryOp::Max => format!("{}({x}, {y})", if f64t { "fmax" } else { "fmaxf" }),
                    BinaryOp::Min => format!("{}({x}, {y})", if f64t { "fmin" } else { "fminf" }),
                };
                (s, *dt)
            }
        }
    }
}
