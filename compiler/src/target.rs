//! Hardware facts of the target (NVIDIA Hopper, `sm_90a`) that the passes and the runner rely
//! on, in one place: warp-group and tensor-core (`wgmma`) shapes, the shared-memory matrix
//! descriptor, and the accumulator fragment layout. Sources: the PTX ISA (sections 9.7.15.5
//! "wgmma.mma_async" and 9.7.15.5.1.2 "matrix descriptor"), checked against CUTLASS's
//! `GmmaDescriptor` and `CLayout_64xN`; see `shared/reference/hopper-matmul.md`.

/// Threads of a warp group: the unit that issues one `wgmma.mma_async`.
pub const WARPGROUP_THREADS: i64 = 128;

/// Rows of the M side of every `wgmma` shape (`m64nNk16`).
pub const WGMMA_M: i64 = 64;

/// The K of one `wgmma` on 16-bit inputs (`k16`), in elements.
pub const WGMMA_K: i64 = 16;

/// Whether `n` is a valid N of `m64nNk16` with an f32 accumulator: a multiple of 8 in 8..=256.
pub fn wgmma_n_valid(n: i64) -> bool {
    (8..=256).contains(&n) && n % 8 == 0
}

/// f32 accumulator registers per thread of an `m64nNk16` tile.
pub fn wgmma_accumulators(n: i64) -> i64 {
    WGMMA_M * n / WARPGROUP_THREADS
}

/// Most registers one thread may hold (the per-thread limit of the register file).
pub const MAX_REGISTERS_PER_THREAD: i64 = 255;

/// Registers a wgmma consumer needs besides its accumulators (descriptors, addresses, loop
/// counters, the epilogue's values): CUTLASS moves its consumers from 232 to 240 registers once
/// the accumulators take 208 or more (`HeavyRegisterPressure`), i.e. it keeps at least 32.
pub const NON_ACCUMULATOR_REGISTERS: i64 = 32;

/// The 14-bit encoding of a byte offset or address in a matrix descriptor: bits 4..18.
pub fn descriptor_encode(bytes: i64) -> u64 {
    ((bytes as u64) & 0x3FFFF) >> 4
}

/// The swizzle field (bits 62..63) of a wgmma matrix descriptor for a shared-memory swizzle of
/// `bytes` (0 = none).
pub fn descriptor_swizzle_mode(bytes: u32) -> Option<u64> {
    match bytes {
        0 => Some(0),
        128 => Some(1),
        64 => Some(2),
        32 => Some(3),
        _ => None,
    }
}

/// Everything of a wgmma shared-memory matrix descriptor but its start address (bits 0..13):
/// leading-dimension byte offset (bits 16..29), stride-dimension byte offset (bits 32..45),
/// base offset 0 (the operand's swizzle pattern starts on its repeat boundary) and the swizzle
/// mode (bits 62..63).
pub fn descriptor_bits(lbo_bytes: i64, sbo_bytes: i64, swizzle: u32) -> Option<u64> {
    let mode = descriptor_swizzle_mode(swizzle)?;
    Some((descriptor_encode(lbo_bytes) << 16) | (descriptor_encode(sbo_bytes) << 32) | (mode << 62))
}

/// The row (M) and column (N) of accumulator register `i` of thread `lane` of warp `warp`
/// (0..4 within the warp group) in an `m64nNk16` f32 tile:
/// `row = 16 warp + lane / 4 + 8 ((i / 2) % 2)`, `col = 8 (i / 4) + 2 (lane % 4) + i % 2`.
pub fn fragment_row_col(i: i64, warp: i64, lane: i64) -> (i64, i64) {
    (
        16 * warp + lane / 4 + 8 * ((i >> 1) & 1),
        8 * (i >> 2) + 2 * (lane % 4) + (i & 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_major_128b_descriptor_matches_the_libraries() {
        // FAST `make_smem_desc`: enc(16) << 16 | enc(1024) << 32 | 1 << 62.
        assert_eq!(
            descriptor_bits(16, 1024, 128),
            Some((1 << 16) | (64 << 32) | (1 << 62))
        );
        assert_eq!(descriptor_bits(16, 1024, 48), None);
        assert_eq!(descriptor_encode(0x4_0010), 1, "addresses wrap at 18 bits");
    }

    #[test]
    fn fragment_covers_the_tile_once() {
        for n in [8, 64, 128, 256] {
            let mut seen = vec![false; (WGMMA_M * n) as usize];
            for t in 0..WARPGROUP_THREADS {
                for i in 0..wgmma_accumulators(n) {
                    let (r, c) = fragment_row_col(i, t / 32, t % 32);
                    assert!(r < WGMMA_M && c < n);
                    let cell = &mut seen[(r * n + c) as usize];
                    assert!(!*cell, "({r}, {c}) twice");
                    *cell = true;
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
    }
}
