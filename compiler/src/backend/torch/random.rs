//! The twin of `rand` and `randn`: hopfuse's generator (`fusion::philox`) in torch int64 ops,
//! so the twin draws the kernel's stream (a uniform bit for bit; a normal to f32 rounding).
//!
//! torch's own `torch.rand` cannot reproduce it: its curand Philox shares one call among four
//! elements of a launch's threads, so its stream depends on the launch (hopfuse's shares one
//! call among four elements by their index: `philox::uniform`). A twin that called it
//! would compute another dropout mask; the runner validates kernels against the float64
//! reference, which computes the same generator exactly.

use crate::fusion::philox;

/// The helpers the twin's module defines when a fusion draws random numbers. Each 32-bit word
/// is held in an int64 tensor in [0, 2^32); a product of two words wraps in int64 (as torch's
/// int64 multiply does on CPU and CUDA) and its high and low halves are masked back out.
pub fn helpers() -> String {
    format!(
        "def _hf_philox(seed, offset, call):
    \"\"\"Philox-4x32-10 (Random123) of the counter (call lo, call hi, offset lo, offset hi)
    under the key (seed lo, seed hi), as hopfuse's kernels compute it: the four words.\"\"\"
    m = 0xFFFFFFFF
    seed = torch.as_tensor(seed, dtype=torch.int64, device=call.device)
    offset = torch.as_tensor(offset, dtype=torch.int64, device=call.device)
    c0, c1, c2, c3 = call & m, (call >> 32) & m, offset & m, (offset >> 32) & m
    k0, k1 = seed & m, (seed >> 32) & m
    for r in range({rounds}):
        if r > 0:
            k0, k1 = (k0 + 0x{w0:X}) & m, (k1 + 0x{w1:X}) & m
        p0, p1 = c0 * 0x{m0:X}, c2 * 0x{m1:X}
        c0, c1, c2, c3 = ((p1 >> 32) & m) ^ c1 ^ k0, p1 & m, ((p0 >> 32) & m) ^ c3 ^ k1, p0 & m
    return c0, c1, c2, c3


def _hf_rand(seed, offset, index):
    \"\"\"hopfuse's rand: word w = index & 3 of call index >> {uniform_shift}, (w >> 8) * 2^-24, a
    uniform float32 in [0, 1).\"\"\"
    c0, c1, c2, c3 = _hf_philox(seed, offset, index >> {uniform_shift})
    k = index & 3
    w = torch.where(k == 0, c0, torch.where(k == 1, c1, torch.where(k == 2, c2, c3)))
    return (w >> 8).float() * {scale:e}


def _hf_randn(seed, offset, index):
    \"\"\"hopfuse's randn: Box-Muller of words 2 (index & 1) and 2 (index & 1) + 1 of call
    index >> {normal_shift}, u1 in (0, 1].\"\"\"
    c0, c1, c2, c3 = _hf_philox(seed, offset, index >> {normal_shift})
    odd = (index & 1) == 1
    u1 = ((torch.where(odd, c2, c0) >> 8) + 1).float() * {scale:e}
    u2 = (torch.where(odd, c3, c1) >> 8).float() * {scale:e}
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(6.283185307179586 * u2)


",
        rounds = philox::ROUNDS,
        w0 = philox::W0,
        w1 = philox::W1,
        m0 = philox::M0,
        m1 = philox::M1,
        scale = philox::UNIFORM_SCALE,
        uniform_shift = philox::UNIFORM_SHIFT,
        normal_shift = philox::NORMAL_SHIFT,
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
            "call & m, (call >> 32) & m, offset & m, (offset >> 32) & m",
            "k0, k1 = seed & m, (seed >> 32) & m",
            "((p1 >> 32) & m) ^ c1 ^ k0, p1 & m, ((p0 >> 32) & m) ^ c3 ^ k1, p0 & m",
            "* 5.960464477539063e-8",
            "_hf_philox(seed, offset, index >> 2)",
            "torch.where(k == 0, c0, torch.where(k == 1, c1, torch.where(k == 2, c2, c3)))",
            "_hf_philox(seed, offset, index >> 1)",
            "torch.where(odd, c2, c0)",
            "torch.where(odd, c3, c1)",
        ] {
            assert!(py.contains(needle), "{needle} not in\n{py}");
        }
    }
}
