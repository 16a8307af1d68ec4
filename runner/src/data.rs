//! Host-side tensor data: seeded inputs, poisoned outputs, and conversion between float64 values
//! and the bytes of each dtype.
//!
//! Poison values written to outputs (and scratch) before a launch, so an element the kernel
//! never writes fails validation:
//! - float types: NaN (quiet NaN of the type);
//! - `i32`: [`I32_POISON`] = `i32::MAX` (0x7fffffff); `i64`, `i8`: their largest value; `u8`:
//!   255 (inputs are small: see [`random_values`]);
//! - 8-bit floats: the NaN byte 0x7f;
//! - `bool`: the byte 0xFF, which is neither 0 nor 1 and reads back as 255.

use half::{bf16, f16};
use hopfuse::DType;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

pub const I32_POISON: i32 = i32::MAX;
pub const BOOL_POISON: u8 = 0xFF;

/// A generator for one named tensor: the stream depends on the seed and the name only, so a
/// tensor's data does not change when parameters are reordered or added.
pub fn rng_for(seed: u64, name: &str) -> ChaCha8Rng {
    // FNV-1a of the name as the ChaCha stream id.
    let stream = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// `n` seeded input values, exactly representable in `dtype`: floats uniform in [-1, 1) before
/// rounding to the dtype (so ±1.0 can occur after it);
/// signed integers in {-8..-1, 1..8} (never 0, so integer division by an input is defined);
/// `u8` in {1..8}; `bool` 0 or 1.
pub fn random_values(dtype: DType, n: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    (0..n)
        .map(|_| match dtype {
            DType::U8 => rng.random_range(1..=8u8) as f64,
            DType::I32 | DType::I64 | DType::I8 => {
                let v: i32 = rng.random_range(1..=8);
                if rng.random::<bool>() {
                    -v as f64
                } else {
                    v as f64
                }
            }
            DType::Bool => rng.random::<bool>() as u8 as f64,
            d => representable(d, rng.random_range(-1.0f64..1.0)),
        })
        .collect()
}

/// Values per block of [`seeded_values`].
const SEED_BLOCK: usize = 1 << 20;

/// The values of input `name` of a run with `seed`: [`random_values`] in blocks of 2^20 values,
/// block `b` drawn from the tensor's stream ([`rng_for`]) at word position `b << 40` (blocks
/// never overlap), so large inputs are drawn on every core and the values do not depend on
/// how many there are.
pub fn seeded_values(dtype: DType, n: usize, seed: u64, name: &str) -> Vec<f64> {
    let mut out = vec![0.0; n];
    crate::host_parallel::Threads::all().for_chunks(&mut out, SEED_BLOCK, |b, block| {
        block.copy_from_slice(&seeded_block(dtype, seed, name, b, block.len()));
    });
    out
}

/// Block `b` (of `len` <= 2^20 values) of [`seeded_values`]: for writers that stream an input
/// block by block (the peers' input files) and must produce the very same values.
pub fn seeded_block(dtype: DType, seed: u64, name: &str, b: usize, len: usize) -> Vec<f64> {
    let mut rng = rng_for(seed, name);
    rng.set_word_pos((b as u128) << 40);
    random_values(dtype, len, &mut rng)
}

/// The inputs of `source` that a `gather` or `index_select` reads as indices, by name, each
/// with the extent of the axis it indexes for `sizes` ([`hopfuse::fusion::build::index_bounds`]):
/// a run draws their values inside `[0, extent)` ([`seeded_input`]), as labels and token ids are,
/// so the torch peers (which raise outside it) take the same inputs. Empty when the program does
/// not build or has no gather.
pub fn index_bounds(source: &str, sizes: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let Ok(f) = hopfuse::reference_fusion(source) else {
        return BTreeMap::new();
    };
    hopfuse::fusion::build::index_bounds(&f)
        .into_iter()
        .filter_map(|(t, extent)| {
            let n = extent.eval(sizes).ok().filter(|&n| n > 0)?;
            Some((f.tensors[t].name.clone(), n))
        })
        .collect()
}

/// The values of input `name`: [`seeded_values`], or with `bound` (an index input,
/// [`index_bounds`]) integers uniform in `[0, bound)` from the same stream and blocks.
pub fn seeded_input(dtype: DType, n: usize, seed: u64, name: &str, bound: Option<i64>) -> Vec<f64> {
    let Some(bound) = bound else {
        return seeded_values(dtype, n, seed, name);
    };
    let mut out = vec![0.0; n];
    crate::host_parallel::Threads::all().for_chunks(&mut out, SEED_BLOCK, |b, block| {
        block.copy_from_slice(&seeded_input_block(
            dtype,
            seed,
            name,
            Some(bound),
            b,
            block.len(),
        ));
    });
    out
}

/// Block `b` of [`seeded_input`] (for writers that stream an input, as [`seeded_block`]).
pub fn seeded_input_block(
    dtype: DType,
    seed: u64,
    name: &str,
    bound: Option<i64>,
    b: usize,
    len: usize,
) -> Vec<f64> {
    let Some(bound) = bound else {
        return seeded_block(dtype, seed, name, b, len);
    };
    let mut rng = rng_for(seed, name);
    rng.set_word_pos((b as u128) << 40);
    (0..len)
        .map(|_| rng.random_range(0..bound) as f64)
        .collect()
}

/// Values per block of [`seeded_values`] (the unit of [`seeded_block`]).
pub const fn seed_block_len() -> usize {
    SEED_BLOCK
}

/// `v` rounded to the nearest value of `dtype` by the compiler's own rounding
/// ([`DType::round`]), the rounding the reference evaluator uses.
pub fn representable(dtype: DType, v: f64) -> f64 {
    dtype.round(v)
}

/// Little-endian bytes of `values` stored as `dtype`. Values should be representable already
/// ([`representable`]): half types go through f32 (`half`'s `from_f64` rounds twice, through f32,
/// so it is not used).
/// Large tensors are encoded on every core.
pub fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    const CHUNK: usize = 1 << 16;
    let w = dtype.size_bytes() as usize;
    let mut out = vec![0u8; values.len() * w];
    crate::host_parallel::Threads::all().for_chunks(&mut out, CHUNK * w, |i, out| {
        let mut bytes = Vec::with_capacity(out.len());
        for &v in &values[i * CHUNK..(i * CHUNK + out.len() / w)] {
            encode_one(dtype, v, &mut bytes);
        }
        out.copy_from_slice(&bytes);
    });
    out
}

fn encode_one(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&bf16::from_f32(v as f32).to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f16::from_f32(v as f32).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(dtype.round(v) as i32).to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(dtype.round(v) as i64).to_le_bytes()),
        DType::I8 => out.push(dtype.round(v) as i8 as u8),
        DType::U8 => out.push(dtype.round(v) as u8),
        DType::F8E4M3 | DType::F8E5M2 => out.push(dtype.fp8_to_bits(v).expect("an 8-bit float")),
        DType::Bool => out.push((v != 0.0) as u8),
    }
}

/// Float64 values of little-endian `dtype` bytes. A `bool` byte reads as its integer value, so
/// the poison byte (255) never equals a reference 0 or 1.
/// Large tensors are decoded on every core.
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    const CHUNK: usize = 1 << 16;
    let w = dtype.size_bytes() as usize;
    let mut out = vec![0.0; bytes.len() / w];
    crate::host_parallel::Threads::all().for_chunks(&mut out, CHUNK, |i, out| {
        let src = &bytes[i * CHUNK * w..];
        for (o, c) in out.iter_mut().zip(src.chunks_exact(w)) {
            *o = match dtype {
                DType::F64 => f64::from_le_bytes(c.try_into().expect("8 bytes")),
                DType::F32 => f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
                DType::BF16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::I32 => i32::from_le_bytes(c.try_into().expect("4 bytes")) as f64,
                DType::I64 => i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64,
                DType::I8 => c[0] as i8 as f64,
                DType::U8 | DType::Bool => c[0] as f64,
                DType::F8E4M3 | DType::F8E5M2 => dtype.fp8_from_bits(c[0]).expect("an 8-bit float"),
            };
        }
    });
    out
}

/// The poison bytes of `n` elements of `dtype` (see the module docs).
pub fn poison(dtype: DType, n: usize) -> Vec<u8> {
    let one: Vec<u8> = match dtype {
        DType::F64 => f64::NAN.to_le_bytes().to_vec(),
        DType::F32 => f32::NAN.to_le_bytes().to_vec(),
        DType::BF16 => bf16::NAN.to_le_bytes().to_vec(),
        DType::F16 => f16::NAN.to_le_bytes().to_vec(),
        DType::I32 => I32_POISON.to_le_bytes().to_vec(),
        DType::I64 => i64::MAX.to_le_bytes().to_vec(),
        DType::I8 => vec![i8::MAX as u8],
        DType::U8 => vec![u8::MAX],
        DType::F8E4M3 | DType::F8E5M2 => vec![0x7f],
        DType::Bool => vec![BOOL_POISON],
    };
    one.repeat(n)
}

/// A scalar kernel argument: its bytes in the low end of an 8-byte slot.
pub fn scalar_slot(dtype: DType, v: f64) -> u64 {
    let mut bytes = [0u8; 8];
    let enc = encode(dtype, &[v]);
    bytes[..enc.len()].copy_from_slice(&enc);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_gathers_index_input_is_drawn_inside_the_axis_it_indexes() {
        let embedding = "fusion e {\n  input table: bf16[V, D]\n  input tokens: i32[T]\n  rows = index_select(table, 0, tokens)\n  output rows\n}\n";
        let sizes: BTreeMap<String, i64> =
            [("T".into(), 3000), ("V".into(), 50257), ("D".into(), 64)].into();
        let bounds = index_bounds(embedding, &sizes);
        assert_eq!(bounds, [("tokens".to_string(), 50257)].into());
        let n = SEED_BLOCK + 77;
        let ids = seeded_input(DType::I32, n, 3, "tokens", Some(50257));
        assert!(ids
            .iter()
            .all(|&v| (0.0..50257.0).contains(&v) && v.fract() == 0.0));
        // Spread over the axis, not the plain inputs' {-8..8}.
        assert!(ids.iter().any(|&v| v > 1000.0) && ids.iter().any(|&v| v < 1000.0));
        // Deterministic, and the blocks a streaming writer produces are the same values.
        assert_eq!(ids, seeded_input(DType::I32, n, 3, "tokens", Some(50257)));
        let streamed: Vec<f64> = (0..2)
            .flat_map(|b| {
                let len = SEED_BLOCK.min(n - b * SEED_BLOCK);
                seeded_input_block(DType::I32, 3, "tokens", Some(50257), b, len)
            })
            .collect();
        assert_eq!(ids, streamed);
        // Without a bound: the plain values.
        assert_eq!(
            seeded_input(DType::I32, 100, 3, "x", None),
            seeded_values(DType::I32, 100, 3, "x")
        );
        // No gather, or a program that does not build: no bounds.
        assert!(index_bounds(
            "fusion f {\n  input x: f32[N]\n  y = x\n  output y\n}\n",
            &sizes
        )
        .is_empty());
        assert!(index_bounds("@@", &sizes).is_empty());
    }

    use super::*;

    /// Blocks come from their own positions of the tensor's stream, whoever draws them.
    #[test]
    fn seeded_values_are_blocks_of_the_stream() {
        let n = 2 * SEED_BLOCK + 1000;
        let v = seeded_values(DType::BF16, n, 9, "x");
        assert_eq!(v, seeded_values(DType::BF16, n, 9, "x"));
        for b in 0..3 {
            let mut rng = rng_for(9, "x");
            rng.set_word_pos((b as u128) << 40);
            let start = b * SEED_BLOCK;
            let len = SEED_BLOCK.min(n - start);
            assert_eq!(
                v[start..start + len],
                random_values(DType::BF16, len, &mut rng)[..]
            );
        }
        // Blocks are not copies of each other, and another name is another stream.
        assert_ne!(v[..1000], v[SEED_BLOCK..SEED_BLOCK + 1000]);
        assert_ne!(v[..1000], seeded_values(DType::BF16, 1000, 9, "y")[..]);
        // Encoding in chunks is encoding one by one.
        let bytes = encode(DType::BF16, &v);
        let mut one_by_one = Vec::new();
        for &x in &v {
            encode_one(DType::BF16, x, &mut one_by_one);
        }
        assert_eq!(bytes, one_by_one);
        assert_eq!(decode(DType::BF16, &bytes), v);
    }

    #[test]
    fn inputs_are_seeded_nonzero_and_representable() {
        for dtype in DType::ALL.into_iter().filter(|&d| d != DType::Bool) {
            let a = random_values(dtype, 1000, &mut rng_for(1, "x"));
            let b = random_values(dtype, 1000, &mut rng_for(1, "x"));
            let c = random_values(dtype, 1000, &mut rng_for(1, "w"));
            let d = random_values(dtype, 1000, &mut rng_for(2, "x"));
            assert_eq!(a, b);
            assert_ne!(a, c);
            assert_ne!(a, d);
            assert!(a.iter().filter(|&&v| v != 0.0).count() > 990, "{dtype}");
            assert!(a.iter().all(|&v| (-8.0..8.0 + 1e-9).contains(&v)));
            if dtype.is_float() {
                assert!(a.iter().all(|&v| (-1.0..=1.0).contains(&v)));
            } else {
                assert!(a
                    .iter()
                    .all(|&v| v != 0.0 && v.fract() == 0.0 && v.abs() <= 8.0));
            }
            // Round trip through the device bytes is exact.
            assert_eq!(decode(dtype, &encode(dtype, &a)), a, "{dtype}");
        }
    }

    #[test]
    fn compiler_rounding_agrees_with_half_from_f32() {
        // `half`'s f32 → f16/bf16 conversions round once, to nearest even: an independent check
        // of `DType::round` on f32 values.
        let mut rng = rng_for(7, "round");
        for _ in 0..50_000 {
            let v = (rng.random_range(-4.0..4.0) * 10f64.powi(rng.random_range(-9..5))) as f32;
            assert_eq!(
                DType::F16.round(v as f64),
                f16::from_f32(v).to_f64(),
                "f16 {v:e}"
            );
            assert_eq!(
                DType::BF16.round(v as f64),
                bf16::from_f32(v).to_f64(),
                "bf16 {v:e}"
            );
        }
    }

    #[test]
    fn poison_decodes_to_values_that_fail_validation() {
        for dtype in [
            DType::F32,
            DType::BF16,
            DType::F16,
            DType::F64,
            DType::F8E4M3,
            DType::F8E5M2,
        ] {
            let p = decode(dtype, &poison(dtype, 3));
            assert_eq!(p.len(), 3);
            assert!(p.iter().all(|v| v.is_nan()), "{dtype}");
        }
        assert_eq!(
            decode(DType::I32, &poison(DType::I32, 2)),
            vec![2147483647.0; 2]
        );
        assert_eq!(decode(DType::Bool, &poison(DType::Bool, 1)), vec![255.0]);
        // Inputs are within ±8: the integer poisons are never a value a kernel computes from
        // them by accident in a copy.
        assert_eq!(decode(DType::I8, &poison(DType::I8, 1)), vec![127.0]);
        assert_eq!(decode(DType::U8, &poison(DType::U8, 1)), vec![255.0]);
        assert_eq!(
            decode(DType::I64, &poison(DType::I64, 1)),
            vec![i64::MAX as f64]
        );
    }

    #[test]
    fn scalar_slots_hold_the_low_bytes() {
        assert_eq!(scalar_slot(DType::F32, 1.0), 1.0f32.to_bits() as u64);
        assert_eq!(scalar_slot(DType::I32, -1.0), 0xffff_ffff);
        assert_eq!(scalar_slot(DType::BF16, 1.0), 0x3f80);
        assert_eq!(scalar_slot(DType::F16, 1.0), 0x3c00);
        assert_eq!(scalar_slot(DType::F64, 2.0), 2.0f64.to_bits());
    }
}
