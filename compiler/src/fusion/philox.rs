//! The counter-based generator behind `rand` and `randn`: Philox-4x32-10 (Salmon et al.,
//! "Parallel random numbers: as easy as 1, 2, 3", SC'11; the Random123 library), computed in
//! integers, and the mappings of its words to a uniform and a normal number.
//!
//! Takes a `seed` (the 64-bit key), an `offset` and an element's row-major linear `index`;
//! guarantees that the value of an element depends on these three numbers only, never on the
//! schedule (threads, splits, vector width), so the float64 reference reproduces the kernel's
//! stream bit for bit. Emits the same algorithm as CUDA text ([`CUDA`], the prelude's
//! `hf_philox` and its users) and as torch ops (`torch::random`); tests check that the three
//! spell the same constants and mapping.
//!
//! One call of the generator feeds several elements, as curand's `curand_uniform4` does, but
//! by the element's index, not by the launch: `rand`'s element `i` takes word `i & 3` of the
//! call whose counter is `[g lo, g hi, offset lo, offset hi]` with `g = i >> 2`
//! ([`UNIFORM_SHIFT`]), so elements `4g .. 4g + 3` share call `g`; `randn` (Box-Muller, two
//! words per element) takes words `2 (i & 1)` and `2 (i & 1) + 1` of call `g = i >> 1`
//! ([`NORMAL_SHIFT`]), so elements `2g` and `2g + 1` share it. The kernel keeps a thread's last
//! call across the lanes of a loop (`hf_philox_memo`, see `backend::codegen::random`) and
//! computes it again only when `g` changes: with 8-element vectors at an index that is a
//! multiple of 4, 2 calls per 8 uniforms instead of 8.

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

/// `rand`'s elements per call, as a shift: element `i` reads word `i & 3` of call `i >> 2`.
pub const UNIFORM_SHIFT: u32 = 2;

/// `randn`'s elements per call, as a shift: element `i` reads words `2 (i & 1)` and
/// `2 (i & 1) + 1` of call `i >> 1`.
pub const NORMAL_SHIFT: u32 = 1;

/// The generator's words of call `call`: counter `[call lo, call hi, offset lo, offset hi]`,
/// key `[seed lo, seed hi]` (each the two's-complement bits of the i64).
pub fn words(seed: i64, offset: i64, call: i64) -> [u32; 4] {
    let split = |v: i64| [v as u64 as u32, ((v as u64) >> 32) as u32];
    let [g0, g1] = split(call);
    let [o0, o1] = split(offset);
    philox4x32_10([g0, g1, o0, o1], split(seed))
}

/// `rand` at element `index`: word `w = index & 3` of call `index >> 2` (an arithmetic shift,
/// as CUDA's and torch's `>>` on a signed 64-bit integer), `(w >> 8) * 2^-24`, a multiple of
/// 2^-24 in [0, 1) (exact in f32).
pub fn uniform(seed: i64, offset: i64, index: i64) -> f64 {
    let w = words(seed, offset, index >> UNIFORM_SHIFT)[(index & 3) as usize];
    f64::from(w >> 8) * UNIFORM_SCALE
}

/// `randn` at element `index` by Box-Muller of words `a = 2 (index & 1)` and `a + 1` of call
/// `index >> 1`: `u1 = ((w_a >> 8) + 1) * 2^-24` in (0, 1] (so its log is finite),
/// `u2 = (w_{a+1} >> 8) * 2^-24`, the value `sqrt(-2 ln u1) * cos(2 pi u2)`.
pub fn normal(seed: i64, offset: i64, index: i64) -> f64 {
    let w = words(seed, offset, index >> NORMAL_SHIFT);
    let a = 2 * (index & 1) as usize;
    let u1 = f64::from((w[a] >> 8) + 1) * UNIFORM_SCALE;
    let u2 = f64::from(w[a + 1] >> 8) * UNIFORM_SCALE;
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The prelude's helpers: the generator (`hf_philox`), the mappings (`hf_rand`, `hf_randn` for a
/// lone element) and their memoized forms (`hf_rand_memo`, `hf_randn_memo`), which keep a
/// thread's last call in an `hf_philox_memo` and call again only when the element's call
/// changes; all in f32 (a uniform is exact; a normal differs from the float64 reference by the
/// f32 rounding of `logf`, `sqrtf` and `cospif`). A memo starts empty (`= {}`: `valid` false),
/// so the first lane of an unrolled loop calls unconditionally once NVRTC has unrolled it.
pub const CUDA: &str = "// Philox-4x32-10 (Random123): counter (call lo, call hi, offset lo, offset hi), key (seed lo, seed hi).
struct hf_philox_words { unsigned x, y, z, w; };
__device__ __forceinline__ hf_philox_words hf_philox(long long seed, long long offset, long long call) {
  hf_philox_words c = {(unsigned)call, (unsigned)((unsigned long long)call >> 32), (unsigned)offset, (unsigned)((unsigned long long)offset >> 32)};
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
// Word k (0..3) of a call.
__device__ __forceinline__ unsigned hf_philox_word(hf_philox_words w, unsigned k) {
  return (k & 2u) ? ((k & 1u) ? w.w : w.z) : ((k & 1u) ? w.y : w.x);
}
// A thread's last call, kept across the lanes of a loop: lanes that share a call compute it once.
struct hf_philox_memo { long long call; hf_philox_words w; bool valid; };
__device__ __forceinline__ hf_philox_words hf_philox_memoized(hf_philox_memo& m, long long seed, long long offset, long long call) {
  if (!m.valid || m.call != call) { m.w = hf_philox(seed, offset, call); m.call = call; m.valid = true; }
  return m.w;
}
// rand: word (index & 3) of call (index >> 2), its top 24 bits in [0, 1).
__device__ __forceinline__ float hf_uniform_of(hf_philox_words w, long long index) {
  return (float)(hf_philox_word(w, (unsigned)index & 3u) >> 8) * 5.960464477539063e-8f;
}
__device__ __forceinline__ float hf_rand(long long seed, long long offset, long long index) {
  return hf_uniform_of(hf_philox(seed, offset, index >> 2), index);
}
__device__ __forceinline__ float hf_rand_memo(hf_philox_memo& m, long long seed, long long offset, long long index) {
  return hf_uniform_of(hf_philox_memoized(m, seed, offset, index >> 2), index);
}
// randn: Box-Muller of words 2 (index & 1) and 2 (index & 1) + 1 of call (index >> 1), u1 in (0, 1].
__device__ __forceinline__ float hf_normal_of(hf_philox_words w, long long index) {
  bool odd = (index & 1) != 0;
  float u1 = (float)(((odd ? w.z : w.x) >> 8) + 1u) * 5.960464477539063e-8f;
  float u2 = (float)((odd ? w.w : w.y) >> 8) * 5.960464477539063e-8f;
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
__device__ __forceinline__ float hf_randn(long long seed, long long offset, long long index) {
  return hf_normal_of(hf_philox(seed, offset, index >> 1), index);
}
__device__ __forceinline__ float hf_randn_memo(hf_philox_memo& m, long long seed, long long offset, long long index) {
  return hf_normal_of(hf_philox_memoized(m, seed, offset, index >> 1), index);
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
        // A call's seed, offset and number land in the key and counter as documented.
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

    /// Elements 0..7 of `rand` are the four words of calls 0 and 1, in order; elements 0..3 of
    /// `randn` the word pairs (0, 1), (2, 3) of calls 0 and 1; a negative index shifts
    /// arithmetically (element -1 is word 3 of call -1).
    #[test]
    fn four_uniforms_and_two_normals_share_a_call() {
        let (seed, offset) = (0x1_2345_6789_i64, -3_i64);
        let top24 = |w: u32| f64::from(w >> 8) * UNIFORM_SCALE;
        let calls = [words(seed, offset, 0), words(seed, offset, 1)];
        let want: Vec<f64> = calls.iter().flat_map(|c| c.map(top24)).collect();
        let got: Vec<f64> = (0..8).map(|i| uniform(seed, offset, i)).collect();
        assert_eq!(got, want);
        assert_eq!(uniform(seed, offset, -1), top24(words(seed, offset, -1)[3]));
        let box_muller = |a: u32, b: u32| {
            let u1 = f64::from((a >> 8) + 1) * UNIFORM_SCALE;
            let u2 = f64::from(b >> 8) * UNIFORM_SCALE;
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        for (i, (call, pair)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
            let w = calls[call];
            let want = box_muller(w[2 * pair], w[2 * pair + 1]);
            assert_eq!(normal(seed, offset, i as i64), want, "randn element {i}");
        }
        // Neighbours that share a call still draw different numbers.
        assert_ne!(uniform(seed, offset, 4), uniform(seed, offset, 5));
        assert_ne!(normal(seed, offset, 0), normal(seed, offset, 1));
    }

    /// The CUDA helpers spell the generator and mapping of this module: its multipliers, key
    /// increments, rounds, counter layout, word choice and 2^-24.
    #[test]
    fn the_cuda_text_is_this_generator() {
        for needle in [
            format!("0x{M0:X}u"),
            format!("0x{M1:X}u"),
            format!("0x{W0:X}u"),
            format!("0x{W1:X}u"),
            format!("r < {ROUNDS}"),
            "c = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0}".to_string(),
            "c = {(unsigned)call, (unsigned)((unsigned long long)call >> 32), (unsigned)offset, (unsigned)((unsigned long long)offset >> 32)}".to_string(),
            "k0 = (unsigned)seed, k1 = (unsigned)((unsigned long long)seed >> 32)".to_string(),
            format!("{UNIFORM_SCALE:e}f"),
            "(k & 2u) ? ((k & 1u) ? w.w : w.z) : ((k & 1u) ? w.y : w.x)".to_string(),
            format!("hf_philox(seed, offset, index >> {UNIFORM_SHIFT}), index)"),
            format!("hf_philox_memoized(m, seed, offset, index >> {UNIFORM_SHIFT}), index)"),
            "hf_philox_word(w, (unsigned)index & 3u) >> 8".to_string(),
            format!("hf_philox(seed, offset, index >> {NORMAL_SHIFT}), index)"),
            format!("hf_philox_memoized(m, seed, offset, index >> {NORMAL_SHIFT}), index)"),
            "(((odd ? w.z : w.x) >> 8) + 1u)".to_string(),
            "((odd ? w.w : w.y) >> 8)".to_string(),
            "cospif(2.0f * u2)".to_string(),
            "if (!m.valid || m.call != call)".to_string(),
        ] {
            assert!(CUDA.contains(&needle), "{needle} not in the CUDA helper");
        }
        assert_eq!(UNIFORM_SCALE, 2f64.powi(-24));
    }
}
