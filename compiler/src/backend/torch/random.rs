//! The twin of `rand` and `randn`: hopfuse's generator (`fusion::philox`) in torch int64 ops,
//! so the twin draws the kernel's stream (a uniform bit for bit; a normal to f32 rounding).
//!
//! torch's own `torch.rand` cannot reproduce it: its curand Philox shares one call among four
//! elements of a launch's threads, so its stream depends on the launch. A twin that called it
//! would compute another dropout mask; the runner validates kernels against the float64
//! reference, which computes the same generator exactly.

use crate::fusion::philox;

/// The helpers the twin's module defines when a fusion draws random numbers. Each 32-bit word
/// is held in an int64 tensor in [0, 2^32); a product of two words wraps in int64 (as torch's
/// int64 multiply does on CPU and CUDA) and its high and low halves are masked back out.
pub fn helpers() -> String {
    format!(
        "def _hf_philox(seed, offset, index):
    \"\"\"Philox-4x32-10 (Random123) of the counter (index lo, index hi, offset lo, offset hi)
    under the key (seed lo, seed hi), as hopfuse's kernels compute it; the first two words.\"\"\"
    m = 0xFFFFFFFF
    seed = torch.as_tensor(seed, dtype=torch.int64, device=index.device)
    offset = torch.as_tensor(offset, dtype=torch.int64, device=index.device)
    c0, c1, c2, c3 = index & m, (index >> 32) & m, offset & m, (offset >> 32) & m
    k0, k1 = seed & m, (seed >> 32) & m
    for r in range({rounds}):
        if r > 0:
            k0, k1 = (k0 + 0x{w0:X}) & m, (k1 + 0x{w1:X}) & m
        p0, p1 = c0 * 0x{m0:X}, c2 * 0x{m1:X}
        c0, c1, c2, c3 = ((p1 >> 32) & m) ^ c1 ^ k0, p1 & m, ((p0 >> 32) & m) ^ c3 ^ k1, p0 & m
    return c0, c1


def _hf_rand(seed, offset, index):
    \"\"\"hopfuse's rand: (w0 >> 8) * 2^-24, a uniform float32 in [0, 1).\"\"\"
    return ((_hf_philox(seed, offset, index)[0] >> 8).float() * {scale:e})


def _hf_randn(seed, offset, index):
    \"\"\"hopfuse's randn: Box-Muller of the first two words, u1 in (0, 1].\"\"\"
    w0, w1 = _hf_philox(seed, offset, index)
    u1 = ((w0 >> 8) + 1).float() * {scale:e}
    u2 = (w1 >> 8).float() * {scale:e}
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(6.283185307179586 * u2)


",
        rounds = philox::ROUNDS,
        w0 = philox::W0,
        w1 = philox::W1,
        m0 = philox::M0,
        m1 = philox::M1,
        scale = philox::UNIFORM_SCALE,
    )
}

#[cfg(test)]
mod tests {
    /// The twin's generator spells the kernel's constants and counter layout.
    #[test]
    fn the_twin_spells_the_generator() {
        let py = super::helpers();
        for needle in [
            "0xD2511F53",
            "0xCD9E8D57",
            "0x9E3779B9",
            "0xBB67AE85",
            "range(10)",
            "index & m, (index >> 32) & m, offset & m, (offset >> 32) & m",
            "k0, k1 = seed & m, (seed >> 32) & m",
            "((p1 >> 32) & m) ^ c1 ^ k0, p1 & m, ((p0 >> 32) & m) ^ c3 ^ k1, p0 & m",
            "* 5.960464477539063e-8",
        ] {
            assert!(py.contains(needle), "{needle} not in\n{py}");
        }
    }
}
