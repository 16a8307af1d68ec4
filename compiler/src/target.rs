//! Hardware facts of the target (NVIDIA Hopper, `sm_90a`) that the passes and the runner rely
//! on, in one place: warp-group and tensor-core (`wgmma`) shapes, the shared-memory matrix
//! descriptor, the accumulator fragment layout, the TMA box rules (`cuTensorMapEncodeTiled`),
//! shared-memory alignment and capacity, and the `setmaxnreg` rules. Sources: the PTX ISA (sections 9.7.15.5
//! "wgmma.mma_async" and 9.7.15.5.1.2 "matrix descriptor"), checked against CUTLASS's
//! `GmmaDescriptor` and `CLayout_64xN`; see `shared/reference/hopper-matmul.md`.

/// Threads of a warp group: the unit that issues one `wgmma.mma_async`.
pub const WARPGROUP_THREADS: i64 = 128;

/// Threads per warp.
pub const WARP_THREADS: i64 = 32;

/// Threads per block (CUDA's limit on every Hopper part).
pub const MAX_THREADS_PER_BLOCK: i64 = 1024;

/// Named barrier ids of generated code: 0 is `__syncthreads()`, 1 the consumer warps' barrier
/// in warp roles, `GROUP_BARRIER_BASE + g` thread group `g`'s barrier (`Stmt::GroupSync`).
pub const GROUP_BARRIER_BASE: u32 = 2;
/// Named barriers per CTA.
pub const NAMED_BARRIERS: u32 = 16;
/// Consumer groups that may take turns (ping-pong): their turn barriers are the top ids.
pub const MAX_TURNS: i64 = 4;

/// The turn barrier of ping-pong group `g` (`Stmt::Turn`), counted down from the top id so
/// that it never meets a group barrier (`GROUP_BARRIER_BASE + g`).
pub fn turn_barrier(g: i64) -> u32 {
    NAMED_BARRIERS - 1 - g as u32
}

/// Rows of the M side of every `wgmma` shape (`m64nNk16`).
pub const WGMMA_M: i64 = 64;

/// Bytes of each operand row one `wgmma` consumes along K: 16 elements of a 16-bit type
/// (`k16`), 32 of an 8-bit one (`k32`). Every K of the instruction follows from it.
pub const WGMMA_K_BYTES: i64 = 32;

/// The K of one `wgmma` on operands of type `t`, in elements (`k16` for f16 / bf16, `k32` for
/// e4m3 / e5m2); `None` for a type the tensor cores do not take from shared memory here.
pub fn wgmma_k(t: crate::DType) -> Option<i64> {
    wgmma_input(t).then(|| WGMMA_K_BYTES / t.size_bytes() as i64)
}

/// Whether `t` is a `wgmma` operand type here: f16, bf16, e4m3 or e5m2.
pub fn wgmma_input(t: crate::DType) -> bool {
    use crate::DType::{BF16, F16, F8E4M3, F8E5M2};
    matches!(t, BF16 | F16 | F8E4M3 | F8E5M2)
}

/// Whether `wgmma` multiplies an `a` operand by a `b` operand: the same 16-bit type, or any
/// two 8-bit types (e4m3 x e5m2 mixes).
pub fn wgmma_types_pair(a: crate::DType, b: crate::DType) -> bool {
    (wgmma_input(a) && a == b) || (a.is_fp8() && b.is_fp8())
}

/// Whether a `wgmma` operand of type `t` may be MN-major: the transpose immediates
/// (`imm-trans-a`, `imm-trans-b`) exist for 16-bit types only, so 8-bit operands are K-major.
pub fn wgmma_transposable(t: crate::DType) -> bool {
    wgmma_input(t) && t.size_bytes() == 2
}

/// Dense 16-bit (bf16, f16) tensor-core FLOP per SM per cycle with an f32 accumulator: H100
/// SXM's 989.4 TFLOP/s over its 132 SMs at the 1,830 MHz that figure assumes (A100's 312
/// TFLOP/s over 108 SMs at 1,410 MHz is 2,048; Hopper doubles it per SM). The runner divides
/// a product's measured FLOP per SM-cycle by it (`hopfuse run --clock`).
pub const TENSOR_FLOP_PER_SM_CYCLE_16BIT: f64 = 4096.0;

/// The tensor cores' dense FLOP per SM per cycle for a product of these operand types (8-bit
/// operands: twice the 16-bit rate, H100 SXM's 1,979 TFLOP/s); `None` for types whose peak
/// this table does not hold (f32 products run on the CUDA cores here).
pub fn tensor_flop_per_sm_cycle(a: crate::DType, b: crate::DType) -> Option<f64> {
    use crate::DType::{BF16, F16};
    if matches!(a, BF16 | F16) && matches!(b, BF16 | F16) {
        Some(TENSOR_FLOP_PER_SM_CYCLE_16BIT)
    } else if a.is_fp8() && b.is_fp8() {
        Some(2.0 * TENSOR_FLOP_PER_SM_CYCLE_16BIT)
    } else {
        None
    }
}

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

/// The row (M) and column (K) of value `i` (0..8) of the A operand of an `m64nNk16` wgmma
/// taken from registers (16-bit types: four `.b32` registers of two values, the lower column
/// in the low half) for thread `lane` of warp `warp`: the accumulator's layout at N = 16
/// (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts"; CUTLASS's
/// `ALayout_64x16` is `CLayout_64x16`). So columns `16 j .. 16 j + 16` of an f32 accumulator
/// fragment, its registers `8 j .. 8 j + 8`, are an A operand as they are, once rounded.
pub fn fragment_a_row_col(i: i64, warp: i64, lane: i64) -> (i64, i64) {
    fragment_row_col(i, warp, lane)
}

/// Shared memory one block may use (the opt-in maximum of an H100:
/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`).
pub const SMEM_PER_BLOCK: i64 = 227 * 1024;

/// Alignment of a TMA box in shared memory (and of every stage of it).
pub const TMA_BOX_ALIGN: i64 = 128;

/// The portable maximum of CTAs per thread-block cluster (more needs the non-portable
/// attribute); a TMA multicast mask has a bit per CTA of the cluster (`%cluster_ctarank`).
pub const MAX_CLUSTER_CTAS: i64 = 8;

/// Streaming multiprocessors of an H100 SXM: a persistent grid's CTA count when no device is
/// at hand to ask (the runner asks the device how many CTAs are resident at once).
pub const SM_COUNT: i64 = 132;

/// The largest tile group of a persistent grid's raster (`persistent(BIDy, group)`): more than
/// an H100's CTAs would put the whole wave in one group.
pub const MAX_RASTER_GROUP: i64 = SM_COUNT;

/// The most CTAs a stream-K grid has: its workspace holds one slot of partial sums and one
/// flag per CTA, sized for this many (two per SM of an H100).
pub const STREAM_K_MAX_CTAS: i64 = 2 * SM_COUNT;

/// The most blocks a grid reduction's grid has (`passes::grid`): its workspace holds one
/// partial value per block for each grid reduction (8 bytes each, 512 KiB per reduction,
/// zeroed once). The automatic schedule sizes its grid to a few waves of the SMs, far below.
pub const GRID_REDUCTION_MAX_BLOCKS: i64 = 65536;

/// Alignment of a box in shared memory: the swizzle pattern repeats every 8 rows of 128 bytes
/// (address bits 4..7 are XORed with bits 7..10), so a swizzled box starts at a multiple of 1024
/// bytes and the pattern is the same relative to its start.
pub fn swizzle_repeat(swizzle: u32) -> i64 {
    if swizzle == 0 {
        TMA_BOX_ALIGN
    } else {
        1024
    }
}

/// Checks the constant parts of a tensor map: the rules of `cuTensorMapEncodeTiled`.
/// `what` names the tensor in messages.
pub fn check_tma_box(what: &str, elem: i64, box_dims: &[i64], swizzle: u32) -> Result<(), String> {
    if box_dims.is_empty() || box_dims.len() > 5 {
        return Err(format!(
            "{what}: a TMA box has rank 1 to 5, this one has rank {}",
            box_dims.len()
        ));
    }
    for (d, &b) in box_dims.iter().enumerate() {
        if !(1..=256).contains(&b) {
            return Err(format!(
                "{what}: box dimension {d} (innermost first) is {b} elements; a TMA box has 1 to 256 elements per dimension"
            ));
        }
    }
    let row = box_dims[0] * elem;
    if row % 16 != 0 {
        return Err(format!(
            "{what}: the inner box row is {row} bytes ({} x {elem}); TMA needs a multiple of 16 bytes",
            box_dims[0]
        ));
    }
    match swizzle {
        0 => {}
        32 | 64 | 128 => {
            if row != swizzle as i64 {
                return Err(format!(
                    "{what}: with {swizzle}-byte swizzle the inner box row must be exactly {swizzle} bytes, it is {row}"
                ));
            }
        }
        s => {
            return Err(format!(
                "{what}: swizzle must be none, 32, 64 or 128 bytes, got {s}"
            ))
        }
    }
    Ok(())
}

/// Register counts of `setmaxnreg`: multiples of 8 in 24..256, producer <= the count every
/// thread starts with <= consumer, and what the consumers' `.inc` takes within what the
/// producers' `.dec` frees. The PTX ISA keeps one register pool per CTA: `.dec` returns
/// registers to it, `.inc` blocks until the pool holds enough, so the block's total after the
/// moves must fit the allocation it was launched with (`entry` per thread, which the kernel's
/// `__launch_bounds__(threads, 1)` sets); registers left in the pool are merely unused.
/// Checked on an H200 (`sm_90a`, 2026-11-28) with a bare 384-thread kernel, to which ptxas gives
/// 168 registers: [64, 192], [40, 232], [24, 240] and [48, 224] complete; [48, 232], 1,024
/// short, hangs (the SM's 1,024 registers outside the launch are not in the pool).
pub fn check_register_sharing(
    producer: u32,
    consumer: u32,
    threads: i64,
    producer_threads: i64,
) -> Result<(), String> {
    for (who, r) in [("producer", producer), ("consumer", consumer)] {
        if !(24..=256).contains(&r) || r % 8 != 0 {
            return Err(format!(
                "the {who} register count is {r}; setmaxnreg takes a multiple of 8 from 24 to 256"
            ));
        }
    }
    let entry = ((65536 / threads).min(255) / 8 * 8) as u32;
    if producer > entry || entry > consumer {
        return Err(format!(
            "registers=[{producer}, {consumer}]: with {threads} threads every thread starts with {entry} registers, and setmaxnreg needs producer <= {entry} <= consumer"
        ));
    }
    let consumer_threads = threads - producer_threads;
    let freed = (entry - producer) as i64 * producer_threads;
    let taken = (consumer - entry) as i64 * consumer_threads;
    if taken > freed {
        // The largest consumer count the producers' registers pay for (a multiple of 8).
        let most = entry as i64 + freed / consumer_threads / 8 * 8;
        return Err(format!(
            "registers=[{producer}, {consumer}]: with {threads} threads every thread starts with {entry} registers; the {consumer_threads} consumer threads' setmaxnreg.inc takes ({consumer} - {entry}) x {consumer_threads} = {taken} registers, but the {producer_threads} producer threads' setmaxnreg.dec frees only ({entry} - {producer}) x {producer_threads} = {freed}, so .inc would wait forever for the rest (the block is launched with {entry} x {threads} = {} registers); with producer {producer} the consumer count can be at most {most}",
            entry as i64 * threads
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_k_spans_32_bytes_of_each_operand() {
        use crate::DType::{BF16, F16, F32, F8E4M3, F8E5M2};
        assert_eq!(wgmma_k(BF16), Some(16));
        assert_eq!(wgmma_k(F16), Some(16));
        assert_eq!(wgmma_k(F8E4M3), Some(32));
        assert_eq!(wgmma_k(F8E5M2), Some(32));
        assert_eq!(wgmma_k(F32), None);
        assert!(wgmma_types_pair(F8E4M3, F8E5M2) && wgmma_types_pair(BF16, BF16));
        assert!(!wgmma_types_pair(BF16, F16) && !wgmma_types_pair(BF16, F8E4M3));
        assert!(wgmma_transposable(BF16) && !wgmma_transposable(F8E4M3));
    }

    #[test]
    fn the_tensor_peak_is_known_for_16_and_8_bit_operands_only() {
        use crate::DType::{BF16, F16, F32, F8E4M3, F8E5M2};
        assert_eq!(tensor_flop_per_sm_cycle(BF16, BF16), Some(4096.0));
        assert_eq!(tensor_flop_per_sm_cycle(F16, F16), Some(4096.0));
        assert_eq!(tensor_flop_per_sm_cycle(F32, F32), None);
        assert_eq!(tensor_flop_per_sm_cycle(BF16, F32), None);
        assert_eq!(tensor_flop_per_sm_cycle(F8E4M3, F8E5M2), Some(8192.0));
        assert_eq!(tensor_flop_per_sm_cycle(F8E4M3, BF16), None);
    }

    #[test]
    fn register_sharing_takes_at_most_what_the_producers_free() {
        // 384 threads start with 168: the producers' 128 free (168 - p) x 128, the consumers'
        // 256 take (c - 168) x 256.
        for (p, c, ok) in [
            (64, 192, true),  // takes 6,144 of 13,312
            (40, 232, true),  // takes all 16,384 freed
            (48, 224, true),  // 14,336 of 15,360
            (48, 232, false), // 16,384 of 15,360: a total of 65,536 > the 64,512 launched
            (168, 168, true), // moves nothing
            (176, 232, false),
            (40, 160, false),
        ] {
            assert_eq!(
                check_register_sharing(p, c, 384, 128).is_ok(),
                ok,
                "[{p}, {c}]"
            );
        }
        let e = check_register_sharing(48, 232, 384, 128).unwrap_err();
        assert!(e.ends_with("can be at most 224"), "{e}");
        // 256 threads start with 248: one consumer group can take up to 256.
        assert!(check_register_sharing(24, 256, 256, 128).is_ok());
    }

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
    fn accumulator_registers_of_16_columns_are_an_a_operand() {
        // Registers 8 j + i of an N-wide accumulator hold A's value i of the k16 slice that
        // starts at column 16 j, for every thread: P goes from one product to the next in
        // registers.
        for n in [16, 64, 128, 256] {
            for t in 0..WARPGROUP_THREADS {
                let (w, l) = (t / 32, t % 32);
                for j in 0..n / 16 {
                    for i in 0..8 {
                        let (r, c) = fragment_row_col(8 * j + i, w, l);
                        let (ra, ka) = fragment_a_row_col(i, w, l);
                        assert_eq!((r, c), (ra, 16 * j + ka), "n {n} thread {t} j {j} i {i}");
                    }
                }
            }
        }
        // The A fragment covers the 64 x 16 slice once.
        let mut seen = [[false; 16]; 64];
        for t in 0..WARPGROUP_THREADS {
            for i in 0..8 {
                let (r, k) = fragment_a_row_col(i, t / 32, t % 32);
                assert!(!seen[r as usize][k as usize]);
                seen[r as usize][k as usize] = true;
            }
        }
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
