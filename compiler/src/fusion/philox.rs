//! The counter-based generator behind `rand` and `randn`: Philox-4x32-10 (Salmon et al.,
//! "Parallel random numbers: as easy as 1, 2, 3", SC'11; the Random123 library), computed in
//! integers, and the mappings of its words to a uniform and a normal number.
//!
//! Takes a `seed` (the 64-bit key), an `offset` and an element's row-major linear `index`
//! (the 128-bit counter `[index lo, index hi, offset lo, offset hi]`); guarantees that the value
//! of an element depends on these three numbers only, never on the schedule (threads, splits,
//! vector width), so the float64 reference reproduces the kernel's stream bit for bit. Emits the
//! same algorithm as CUDA text ([`CUDA`], the prelude's `philox` helper) and as torch ops
//! (`torch::PHILOX_PY`); a test checks that the three spell the same constants.
//!
//! One call of the generator per element: the first word gives a uniform, the first two a
//! normal. (PyTorch's `curand_uniform4` shares one call among four elements of a thread's grid-
//! stride loop, which ties the stream to the launch; here the stream is independent of the
//! schedule, at the cost of three unused words.)

/// Philox's round multipliers and Weyl key increments (Random123's `PHILOX_M4x32_0/1`,
/// `PHILOX_W32_0/1`).
pub const M0: u32 = 0xD251_1F53;
pub const M1: u32 = 0xCD9E_8D57;
pub const W0: u32 = 0x9E37_79B9;
pub const W1: u32 = 0xBB67_AE85;

/// The number of rounds.
pub const ROUNDS: usize = 10;

/// 2^-24: a uniform is the top 24 bits of the first word times this, in [0, 1), exact in f32.
pub const UNIFORM_SCALE: f64 = 1.0 / 16_777_216.0;

/// Philox-4x32-10 of `counter` under `key`, as Random123's `philox4x32_R(10, ctr, key)`.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mulhilo = |a: u32, b: u32| {
        let p = u64::from(a) * u64::from(b);
        (p as u32, (p >> 32) as u32)
    };
    let (mut c, mut k) = (counter, key);
    for round in 0..ROUNDS {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let (lo0, hi0) = mulhilo(M0, c[0]);
        let (lo1, hi1) = mulhilo(M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The generator's words for one element: counter `[index lo, index hi, offset lo, offset hi]`,
/// key `[seed lo, seed hi]` (each the two's-complement bits of the i64).
pub fn words(seed: i64, offset: i64, index: i64) -> [u32; 4] {
    let split = |v: i64| [v as u64 as u32, ((v as u64) >> 32) as u32];
    let [i0, i1] = split(index);
    let [o0, o1] = split(offset);
    philox4x32_10([i0, i1, o0, o1], split(seed))
}

/// `rand`: `(w0 >> 8) * 2^-24`, a multiple of 2^-24 in [0, 1) (exact in f32).
pub fn uniform(seed: i64, offset: i64, index: i64) -> f64 {
    f64::from(words(seed, offset, index)[0] >> 8) * UNIFORM_SCALE
}

/// `randn` by Box-Muller: `u1 = ((w0 >> 8) + 1) * 2^-24` in (0, 1] (so its log is finite),
/// `u2 = (w1 >> 8) * 2^-24`, the value `sqrt(-2 ln u1) * cos(2 pi u2)`.
pub fn normal(seed: i64, offset: i64, index: i64) -> f64 {
    let w = words(seed, offset, index);
    let u1 = f64::from((w[0] >> 8) + 1) * UNIFORM_SCALE;
    let u2 = f64::from(w[1] >> 8) * UNIFORM_SCALE;
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The prelude's helpers (`hf_rand`, `hf_randn`): the same generator and mappings in CUDA, in
/// f32 (a uniform is exact; a normal differs from the float64 reference by the f32 rounding
/// of `logf`, `sqrtf` and `cospif`).
pub const CUDA: &str = "// Philox-4x32-10 (Random123): counter (index lo, index hi, offset lo, offset hi), key (seed lo, seed hi).
struct hf_philox_words { unsigned x, y, z, w; };
__device__ __forceinline__ hf_philox_words hf_philox(long long seed, long long offset, long long index) {
  hf_philox_words c = {(unsigned)index, (unsigned)((unsigned long long)index >> 32), (unsigned)offset, (unsigned)((unsigned long long)offset >> 32)};
  unsigned k0 = (unsigned)seed, k1 = (unsigned)((unsigned long long)seed >> 32);
  #pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    unsigned hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    unsigned hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
  }
  return c;
}
// rand: the top 24 bits of the first word in [0, 1).
__device__ __forceinline__ float hf_rand(long long seed, long long offset, long long index) {
  return (float)(hf_philox(seed, offset, index).x >> 8) * 5.960464477539063e-8f;
}
// randn: Box-Muller of the first two words, u1 in (0, 1].
__device__ __forceinline__ float hf_randn(long long seed, long long offset, long long index) {
  hf_philox_words w = hf_philox(seed, offset, index);
  float u1 = (float)((w.x >> 8) + 1u) * 5.960464477539063e-8f;
  float u2 = (float)(w.y >> 8) * 5.960464477539063e-8f;
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
";

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's `kat_vectors` for philox4x32 with 10 rounds (counter, key, result).
    #[test]
    fn known_answers_of_random123() {
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0; 4],
                [0; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (counter, key, want) in kat {
            assert_eq!(philox4x32_10(counter, key), want, "{counter:x?} {key:x?}");
        }
        // The element's numbers land in the counter and key as documented.
        assert_eq!(
            words(
                0x299f31d0_a4093822,
                0x03707344_13198a2e,
                0x85a308d3_243f6a88_u64 as i64
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
        assert_eq!(words(-1, -1, -1), kat[1].2);
    }

    #[test]
    fn uniform_and_normal_map_the_words_as_documented() {
        // Counter and key 0: w0 = 0x6627e8d5, w1 = 0xe169c58d.
        assert_eq!(uniform(0, 0, 0), f64::from(0x6627e8u32) / 16_777_216.0);
        let u1 = f64::from(0x6627e8u32 + 1) / 16_777_216.0;
        let u2 = f64::from(0xe169c5u32) / 16_777_216.0;
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        assert_eq!(normal(0, 0, 0), z);
        // Every uniform is a float32 in [0, 1); the normals of many elements look normal.
        let n = 1 << 14;
        let (mut sum, mut sq) = (0.0, 0.0);
        for i in 0..n {
            let u = uniform(7, 3, i);
            assert!((0.0..1.0).contains(&u) && u as f32 as f64 == u);
            let z = normal(7, 3, i);
            sum += z;
            sq += z * z;
        }
        let mean = sum / n as f64;
        let var = sq / n as f64 - mean * mean;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        // Seed, offset and index each change the stream.
        assert_ne!(uniform(1, 0, 5), uniform(2, 0, 5));
        assert_ne!(uniform(1, 0, 5), uniform(1, 1, 5));
        assert_ne!(uniform(1, 0, 5), uniform(1, 0, 6));
    }

    /// The CUDA helper spells the generator of this module: its multipliers, key increments,
    /// rounds, counter layout and 2^-24.
    #[test]
    fn the_cuda_text_is_this_generator() {
        for needle in [
            format!("0x{M0:X}u"),
            format!("0x{M1:X}u"),
            format!("0x{W0:X}u"),
            format!("0x{W1:X}u"),
            format!("r < {ROUNDS}"),
            "c = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0}".to_string(),
            "c = {(unsigned)index, (unsigned)((unsigned long long)index >> 32), (unsigned)offset, (unsigned)((unsigned long long)offset >> 32)}".to_string(),
            "k0 = (unsigned)seed, k1 = (unsigned)((unsigned long long)seed >> 32)".to_string(),
            format!("{UNIFORM_SCALE:e}f"),
            ".x >> 8) * ".to_string(),
            "((w.x >> 8) + 1u)".to_string(),
            "cospif(2.0f * u2)".to_string(),
        ] {
            assert!(CUDA.contains(&needle), "{needle} not in the CUDA helper");
        }
        assert_eq!(UNIFORM_SCALE, 2f64.powi(-24));
    }
}
