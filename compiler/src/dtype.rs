//! Element types.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bool,
    I32,
    BF16,
    F16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 6] = [
        DType::Bool,
        DType::I32,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "bool" => DType::Bool,
            "i32" => DType::I32,
            "bf16" => DType::BF16,
            "f16" => DType::F16,
            "f32" => DType::F32,
            "f64" => DType::F64,
            _ => return None,
        })
    }

    pub fn size_bytes(self) -> u32 {
        match self {
            DType::Bool => 1,
            DType::BF16 | DType::F16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::F64 => 8,
        }
    }

    /// The CUDA type that stores the value.
    pub fn cuda(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "int",
            DType::BF16 => "__nv_bfloat16",
            DType::F16 => "__half",
            DType::F32 => "float",
            DType::F64 => "double",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::BF16 | DType::F16 | DType::F32 | DType::F64)
    }

    /// The type arithmetic on this type happens in: half types compute in f32.
    pub fn compute(self) -> DType {
        match self {
            DType::BF16 | DType::F16 => DType::F32,
            d => d,
        }
    }

    /// The result type of arithmetic mixing `a` and `b`.
    pub fn promote(a: DType, b: DType) -> DType {
        a.compute().max(b.compute())
    }

    /// Relative-L2 tolerance when validating a result of this type against float64.
    pub fn tolerance(self) -> f64 {
        match self {
            DType::BF16 | DType::F16 => 1e-2,
            DType::F32 => 1e-5,
            DType::F64 => 1e-12,
            DType::I32 | DType::Bool => 0.0,
        }
    }

    /// Rounds a float64 value to the nearest value representable in this type.
    pub fn round(self, v: f64) -> f64 {
        match self {
            DType::F64 => v,
            DType::F32 => v as f32 as f64,
            DType::BF16 => round_bits(v as f32, 7),
            DType::F16 => round_f16(v),
            DType::I32 => {
                if v.is_nan() {
                    0.0
                } else {
                    v.trunc().clamp(i32::MIN as f64, i32::MAX as f64)
                }
            }
            DType::Bool => (v != 0.0) as u8 as f64,
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
}
