//! Element types: their names in programs, storage sizes and CUDA types, the type arithmetic
//! happens in, the promotion order, validation tolerances, and how a float64 value rounds to
//! each (the f64 reference's rounding, which must equal what the kernel and PyTorch do).
//!
//! Conversions follow PyTorch on CUDA:
//! - float to `f8e4m3` / `f8e5m2` (torch's `float8_e4m3fn` / `float8_e5m2`): through f32, round
//!   to nearest even; out of range is NaN for e4m3 (it has no infinity: |x| > 464, the midpoint
//!   above 448) and an infinity for e5m2 (|x| >= 61440, the midpoint above 57344). A saturating
//!   cast (`cast(x, f8e4m3, saturate=true)`) clamps to the largest finite value first.
//! - float to integer: NaN is 0, toward zero, saturating at the type's range (`i8`, `i32`,
//!   `i64`), except `u8`, which goes through i64 and wraps modulo 256 (c10's `TypeCast.h`).
//! - integer to a narrower integer: wraps (two's complement).
//! - anything to `bool`: non-zero is true.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An element type. The order is the promotion order of integers (bool < u8 < i8 < i32 < i64,
/// with u8 and i8 refused together, see [`crate::fusion::ops::promote`]) and of floats by what
/// they compute in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bool,
    U8,
    I8,
    I32,
    I64,
    /// 8-bit float, 4 exponent and 3 mantissa bits, no infinity (torch's `float8_e4m3fn`,
    /// CUDA's `__nv_fp8_e4m3`): largest finite 448.
    F8E4M3,
    /// 8-bit float, 5 exponent and 2 mantissa bits (torch's `float8_e5m2`, CUDA's
    /// `__nv_fp8_e5m2`): largest finite 57344.
    F8E5M2,
    BF16,
    F16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 11] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    pub fn size_bytes(self) -> u32 {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::BF16 | DType::F16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The CUDA type that stores the value.
    pub fn cuda(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "unsigned char",
            DType::I8 => "signed char",
            DType::I32 => "int",
            DType::I64 => "long long",
            DType::F8E4M3 => "__nv_fp8_e4m3",
            DType::F8E5M2 => "__nv_fp8_e5m2",
            DType::BF16 => "__nv_bfloat16",
            DType::F16 => "__half",
            DType::F32 => "float",
            DType::F64 => "double",
        }
    }

    /// PyTorch's name of the type (`torch.<name>`).
    pub fn torch(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F8E4M3 => "float8_e4m3fn",
            DType::F8E5M2 => "float8_e5m2",
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F8E4M3 | DType::F8E5M2 | DType::BF16 | DType::F16 | DType::F32 | DType::F64
        )
    }

    /// An integer type (bool is not one).
    pub fn is_integer(self) -> bool {
        matches!(self, DType::U8 | DType::I8 | DType::I32 | DType::I64)
    }

    /// An 8-bit float type.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// The type arithmetic on this type happens in: half and 8-bit float types compute in f32.
    /// (8-bit integers compute in themselves, wrapping as torch's do: the kernel computes in
    /// int and converts each result back.)
    pub fn compute(self) -> DType {
        match self {
            DType::BF16 | DType::F16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
            d => d,
        }
    }

    /// The largest finite value of a float type (None for others).
    pub fn max_finite(self) -> Option<f64> {
        match self {
            DType::F8E4M3 => Some(448.0),
            DType::F8E5M2 => Some(57344.0),
            DType::BF16 => Some(f32::from_bits(0x7f7f_0000) as f64),
            DType::F16 => Some(65504.0),
            DType::F32 => Some(f32::MAX as f64),
            DType::F64 => Some(f64::MAX),
            _ => None,
        }
    }

    /// The range of an integer type (None for others).
    pub fn int_range(self) -> Option<(f64, f64)> {
        match self {
            DType::U8 => Some((0.0, 255.0)),
            DType::I8 => Some((-128.0, 127.0)),
            DType::I32 => Some((i32::MIN as f64, i32::MAX as f64)),
            DType::I64 => Some((i64::MIN as f64, i64::MAX as f64)),
            _ => None,
        }
    }

    /// Relative-L2 tolerance when validating a result of this type against float64. The 8-bit
    /// floats' steps are 1/8 (e4m3) and 1/4 (e5m2) of a value: a result computed in f32 that
    /// lands on the other side of a rounding midpoint than the f64 reference is off by a
    /// whole step, so the tolerance allows a few such elements in a thousand.
    pub fn tolerance(self) -> f64 {
        match self {
            DType::F8E4M3 => 2e-2,
            DType::F8E5M2 => 4e-2,
            DType::BF16 | DType::F16 => 1e-2,
            DType::F32 => 1e-5,
            DType::F64 => 1e-12,
            DType::I32 | DType::I64 | DType::I8 | DType::U8 | DType::Bool => 0.0,
        }
    }

    /// The value of `v` converted to this type from a float (the reference's `cast` from a
    /// float type, a literal in an op of this type, an input's data): rounded to nearest
    /// even for floats, the rules of the module doc for integers.
    pub fn round(self, v: f64) -> f64 {
        match self {
            DType::F64 => v,
            DType::F32 => v as f32 as f64,
            DType::BF16 => round_bits(v as f32, 7),
            DType::F16 => round_f16(v),
            DType::F8E4M3 => E4M3.round(v as f32),
            DType::F8E5M2 => E5M2.round(v as f32),
            DType::U8 => {
                // Through i64 (saturating, NaN to 0), then modulo 256.
                let i = if v.is_nan() { 0 } else { v.trunc() as i64 };
                (i as u8) as f64
            }
            DType::I8 | DType::I32 | DType::I64 => {
                let (lo, hi) = self.int_range().expect("an integer type");
                if v.is_nan() {
                    0.0
                } else {
                    v.trunc().clamp(lo, hi)
                }
            }
            DType::Bool => (v != 0.0) as u8 as f64,
        }
    }

    /// `v`, a value of type `from`, converted to this type (`cast`): from an integer or bool to
    /// a narrower integer it wraps, otherwise [`DType::round`].
    pub fn convert_from(self, from: DType, v: f64) -> f64 {
        if (from.is_integer() || from == DType::Bool) && self.is_integer() {
            self.wrap(v)
        } else if from.is_integer() && self.is_fp8() {
            // An integer reaches an 8-bit float through f32, as the kernel converts it.
            self.round(v as f32 as f64)
        } else {
            self.round(v)
        }
    }

    /// The result of integer arithmetic held in this type: 8-bit integers wrap modulo 256 (as
    /// torch's do); `i32` saturates (what the reference has always done; a kernel's overflow
    /// wraps, and validation reports the difference); `i64` and other types keep the value
    /// (float64 holds an i64 exactly up to 2^53).
    pub fn arithmetic_result(self, v: f64) -> f64 {
        match self {
            DType::U8 | DType::I8 => self.wrap(v),
            DType::I32 => self.round(v),
            _ => v,
        }
    }

    /// The byte that stores `v` in an 8-bit float type (rounded first, as [`DType::round`];
    /// NaN is 0x7f with v's sign, as torch stores it). None for other types.
    pub fn fp8_to_bits(self, v: f64) -> Option<u8> {
        let f = self.fp8_format()?;
        let r = self.round(v);
        let sign = if r.is_sign_negative() { 0x80 } else { 0 };
        let m = f.mantissa as u32;
        let bias = f.bias();
        let magnitude = if r.is_nan() {
            0x7f
        } else if r.is_infinite() {
            (0x7f >> m) << m
        } else if r == 0.0 {
            0
        } else {
            let a = r.abs();
            let exp = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
            if exp < f.min_exp {
                (a / 2f64.powi(f.min_exp - f.mantissa)) as u8
            } else {
                let mant = ((a / 2f64.powi(exp) - 1.0) * 2f64.powi(f.mantissa)) as u8;
                (((exp + bias) as u8) << m) | mant
            }
        };
        Some(sign | magnitude)
    }

    /// The value of an 8-bit float type's byte. None for other types.
    pub fn fp8_from_bits(self, b: u8) -> Option<f64> {
        let f = self.fp8_format()?;
        let m = f.mantissa as u32;
        let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = ((b & 0x7f) >> m) as i32;
        let mant = (b & ((1 << m) - 1)) as f64;
        let top: i32 = 0x7f >> m;
        let v = match self {
            DType::F8E4M3 if b & 0x7f == 0x7f => f64::NAN,
            DType::F8E5M2 if e == top && mant != 0.0 => f64::NAN,
            DType::F8E5M2 if e == top => f64::INFINITY,
            _ if e == 0 => mant * 2f64.powi(f.min_exp - f.mantissa),
            _ => (1.0 + mant / 2f64.powi(f.mantissa)) * 2f64.powi(e - f.bias()),
        };
        Some(sign * v)
    }

    fn fp8_format(self) -> Option<&'static Fp8> {
        match self {
            DType::F8E4M3 => Some(&E4M3),
            DType::F8E5M2 => Some(&E5M2),
            _ => None,
        }
    }

    /// An integral `v` wrapped into this integer type's range (two's complement).
    fn wrap(self, v: f64) -> f64 {
        let i = if v.is_nan() { 0 } else { v as i64 };
        match self {
            DType::U8 => i as u8 as f64,
            DType::I8 => i as i8 as f64,
            DType::I32 => i as i32 as f64,
            _ => i as f64,
        }
    }
}

/// An 8-bit float format: `mantissa` explicit bits, `min_exp` the exponent of the smallest
/// normal value, `max` the largest finite value and what a larger magnitude becomes.
struct Fp8 {
    mantissa: i32,
    min_exp: i32,
    max: f64,
    overflow: f64,
}

const E4M3: Fp8 = Fp8 {
    mantissa: 3,
    min_exp: -6,
    max: 448.0,
    overflow: f64::NAN,
};

const E5M2: Fp8 = Fp8 {
    mantissa: 2,
    min_exp: -14,
    max: 57344.0,
    overflow: f64::INFINITY,
};

impl Fp8 {
    /// The exponent bias (the smallest normal value is 2^(1 - bias)).
    fn bias(&self) -> i32 {
        1 - self.min_exp
    }

    /// `x` rounded to nearest even in this format (subnormals included); a result beyond the
    /// largest finite value is `overflow` with x's sign (e4m3: NaN, e5m2: an infinity), as
    /// torch's `fp8e4m3fn_from_fp32_value` and `fp8e5m2_from_fp32_value` (and CUDA's
    /// `__nv_cvt_float_to_fp8(.., __NV_NOSAT, ..)`) convert.
    fn round(&self, x: f32) -> f64 {
        let v = x as f64;
        if v.is_nan() {
            return v;
        }
        if v.is_infinite() {
            return self.overflow.copysign(v);
        }
        if v == 0.0 {
            return v;
        }
        let a = v.abs();
        // The exponent of `a` (an f32 is a normal f64) and the spacing of the format there.
        let exp = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let ulp = 2f64.powi(exp.max(self.min_exp) - self.mantissa);
        let r = (a / ulp).round_ties_even() * ulp;
        if r > self.max {
            self.overflow.copysign(v)
        } else {
            r.copysign(v)
        }
    }
}

/// Round-to-nearest-even of an f32 to `mantissa` explicit bits (bf16: 7).
fn round_bits(x: f32, mantissa: u32) -> f64 {
    if !x.is_finite() {
        return x as f64;
    }
    let drop = 23 - mantissa;
    let bits = x.to_bits();
    let half = 1u32 << (drop - 1);
    let lsb = (bits >> drop) & 1;
    let rounded = bits.wrapping_add(half - 1 + lsb) & !((1u32 << drop) - 1);
    f32::from_bits(rounded) as f64
}

/// Round-to-nearest-even to IEEE half precision (with subnormals and overflow to infinity).
fn round_f16(v: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let a = v.abs();
    if a >= 65520.0 {
        return f64::INFINITY.copysign(v);
    }
    // Spacing of representable values around `a`.
    let exp = a.log2().floor().max(-14.0);
    let ulp = 2f64.powf(exp - 10.0);
    let q = a / ulp;
    let r = q.round();
    let r = if (q - q.floor() - 0.5).abs() < 1e-12 && r % 2.0 != 0.0 {
        r - 1.0
    } else {
        r
    };
    (r * ulp).copysign(v)
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_keeps_eight_significant_bits() {
        assert_eq!(DType::BF16.round(1.0), 1.0);
        assert_eq!(DType::BF16.round(1.0 + 1.0 / 256.0), 1.0); // tie goes to even
        assert_eq!(DType::BF16.round(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
    }

    #[test]
    fn f16_rounding() {
        assert_eq!(DType::F16.round(1.0 + 1.0 / 4096.0), 1.0);
        assert_eq!(DType::F16.round(65519.0), 65504.0);
        assert!(DType::F16.round(70000.0).is_infinite());
    }

    #[test]
    fn e4m3_rounds_as_torch_float8_e4m3fn() {
        let r = |v: f64| DType::F8E4M3.round(v);
        // Exact values, the largest finite and the smallest subnormal.
        for v in [
            0.0,
            1.0,
            -1.0,
            1.125,
            448.0,
            -448.0,
            240.0,
            2f64.powi(-6),
            2f64.powi(-9),
        ] {
            assert_eq!(r(v), v, "{v}");
        }
        // Ties to even: 1 + 1/16 lies midway between 1 and 1.125 (mantissa 000 is even).
        assert_eq!(r(1.0 + 1.0 / 16.0), 1.0);
        assert_eq!(r(1.125 + 1.0 / 16.0), 1.25);
        assert_eq!(r(1.0 + 1.0 / 16.0 + 1e-6), 1.125);
        // Above 448: up to the midpoint 464 rounds to 448 (a tie to even), beyond it is NaN
        // (torch: >= 480 is NaN outright, and (464, 480) rounds to the NaN pattern 0x7f).
        assert_eq!(r(460.0), 448.0);
        assert_eq!(r(464.0), 448.0);
        assert_eq!(r(-464.0), -448.0);
        assert!(r(464.01).is_nan());
        assert!(r(479.0).is_nan());
        assert!(r(480.0).is_nan());
        assert!(r(1e6).is_nan());
        assert!(r(f64::INFINITY).is_nan());
        assert!(r(f64::NEG_INFINITY).is_nan());
        assert!(r(f64::NAN).is_nan());
        // Subnormals step by 2^-9; half of the smallest is a tie to 0, above it rounds up.
        assert_eq!(r(2f64.powi(-10)), 0.0);
        assert_eq!(r(2f64.powi(-10) * 1.01), 2f64.powi(-9));
        assert_eq!(r(3.0 * 2f64.powi(-10)), 2.0 * 2f64.powi(-9)); // tie to even (2)
        assert_eq!(r(5.0 * 2f64.powi(-10)), 2.0 * 2f64.powi(-9)); // tie to even (2)
        assert_eq!(r(-2f64.powi(-9)), -2f64.powi(-9));
        // Through f32 first, as torch converts: the f64 just above a tie rounds to the tie in
        // f32 and then to even.
        assert_eq!(r(1.0 + 1.0 / 16.0 + 1e-12), 1.0);
        // Every one of the 256 codes round-trips (the 126 positive finite values).
        let finite = e4m3_values();
        assert_eq!(finite.len(), 126);
        for v in finite {
            assert_eq!(r(v), v);
            assert_eq!(r(-v), -v);
        }
    }

    /// The positive finite non-zero e4m3 values, decoded from their bits.
    fn e4m3_values() -> Vec<f64> {
        (1u32..0x7f)
            .map(|b| {
                let (e, m) = ((b >> 3) as i32, (b & 7) as f64);
                if e == 0 {
                    m / 8.0 * 2f64.powi(-6)
                } else {
                    (1.0 + m / 8.0) * 2f64.powi(e - 7)
                }
            })
            .collect()
    }

    #[test]
    fn e5m2_rounds_as_torch_float8_e5m2() {
        let r = |v: f64| DType::F8E5M2.round(v);
        for v in [
            1.0,
            1.25,
            1.5,
            1.75,
            57344.0,
            2f64.powi(-14),
            2f64.powi(-16),
        ] {
            assert_eq!(r(v), v, "{v}");
        }
        assert_eq!(r(1.125), 1.0); // tie to even
        assert_eq!(r(1.375), 1.5); // tie to even
                                   // Up to just below the midpoint 61440 rounds to 57344; from it on, an infinity.
        assert_eq!(r(61439.0), 57344.0);
        assert_eq!(r(61440.0), f64::INFINITY);
        assert_eq!(r(-61440.0), f64::NEG_INFINITY);
        assert_eq!(r(1e9), f64::INFINITY);
        assert_eq!(r(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert!(r(f64::NAN).is_nan());
        assert_eq!(r(2f64.powi(-17)), 0.0); // half the smallest subnormal: a tie to 0
        assert_eq!(r(3.0 * 2f64.powi(-17)), 2.0 * 2f64.powi(-16)); // tie to even
    }

    #[test]
    fn integer_conversions() {
        assert_eq!(DType::U8.round(-1.0), 255.0);
        assert_eq!(DType::U8.round(300.7), 44.0);
        assert_eq!(DType::U8.round(f64::NAN), 0.0);
        assert_eq!(DType::I8.round(300.0), 127.0);
        assert_eq!(DType::I8.round(-1e9), -128.0);
        assert_eq!(DType::I8.round(-3.9), -3.0);
        assert_eq!(DType::I64.round(1e30), i64::MAX as f64);
        // Between integers a cast wraps; from bool it is 0 or 1.
        assert_eq!(DType::I8.convert_from(DType::I32, 200.0), -56.0);
        assert_eq!(DType::U8.convert_from(DType::I8, -1.0), 255.0);
        assert_eq!(DType::I64.convert_from(DType::I8, -1.0), -1.0);
        assert_eq!(DType::I8.convert_from(DType::F32, 200.0), 127.0);
        assert_eq!(DType::U8.arithmetic_result(256.0 + 3.0), 3.0);
        assert_eq!(DType::I8.arithmetic_result(128.0), -128.0);
        assert!(DType::F8E4M3.convert_from(DType::I32, 1000.0).is_nan());
        assert_eq!(DType::F8E4M3.convert_from(DType::I32, 17.0), 16.0); // tie to even
    }

    #[test]
    fn fp8_bytes_round_trip() {
        for d in [DType::F8E4M3, DType::F8E5M2] {
            for b in 0..=255u8 {
                let v = d.fp8_from_bits(b).unwrap();
                if v.is_nan() {
                    continue;
                }
                assert_eq!(d.fp8_to_bits(v), Some(b), "{d} {b:#x} = {v}");
                assert_eq!(d.round(v), v, "{d} {b:#x}");
            }
        }
        assert_eq!(DType::F8E4M3.fp8_from_bits(0x7e), Some(448.0));
        assert!(DType::F8E4M3.fp8_from_bits(0xff).unwrap().is_nan());
        assert_eq!(DType::F8E5M2.fp8_from_bits(0x7b), Some(57344.0));
        assert_eq!(DType::F8E5M2.fp8_from_bits(0xfc), Some(f64::NEG_INFINITY));
        assert_eq!(DType::F8E4M3.fp8_to_bits(f64::NAN), Some(0x7f));
        assert_eq!(DType::F8E4M3.fp8_to_bits(1000.0), Some(0x7f));
        assert_eq!(DType::F8E5M2.fp8_to_bits(-1e6), Some(0xfc));
        assert_eq!(DType::F8E4M3.fp8_to_bits(2f64.powi(-9)), Some(0x01));
        assert_eq!(DType::F32.fp8_to_bits(1.0), None);
    }

    #[test]
    fn names_parse_back() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("f8"), None);
    }
}
