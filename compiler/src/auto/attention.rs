//! The attention scheduler: FlashAttention-3's kernel for `softmax(q k^T * scale) v`, as the
//! hand schedules of `examples/attention/` write it, with the fusion's own tensor names.
//!
//! Takes an attention [`crate::fusion::attention::find`] recognises (the recognition the
//! SDPA peers narrow: a score modification such as a softcap or ALiBi's bias, any mask on
//! `iota`s or reading inputs such as a document mask, a scale without a value, the
//! log-sum-exp as a second output): bf16 or f16 `q [B?, S, D]`, `k [B?, T, D]`,
//! `v [B?, T, D]` of one dtype, `D` a constant 64, 128 or 256, the probabilities cast to that
//! dtype before `p v`, and the output a cast of the normalised result. Anything else is
//! declined with what it has that the kernel does not take.
//!
//! Grouped-query attention (`q [B?, G, S, D]` against `k`, `v [B?, T, D]` read through
//! `broadcast(x, axis=[..])` over the `G` query heads of a K/V head) gets the same kernels with
//! `G` on blockIdx.z (blockIdx.y without a batch axis): q's, the scores' and the output's
//! positions one further, k's and v's boxes as without it (examples/attention/online_wgmma_gqa.hf
//! is the hand form).
//!
//! Emits, without the batch axis when there is none (`Kernel` says which):
//! - D = 128: online_wgmma_overlap_pingpong.hf's schedule, statement for statement (its
//!   causal twin's with a mask): two consumer warp groups of 64 queries (128 a block, the
//!   groups on TIDy), a producer warp group with K and V on their own warps, `setmaxnreg`
//!   24 / 240, key tiles of 128 in two stages, `online_softmax(o, overlap=products)` and
//!   `turns=products`; q's and k's tiles as two 64-column slabs (two TMA boxes each).
//! - D = 256: the same kernel on key tiles of 64 (`Kernel::PING_PONG_NARROW`: two stages of
//!   128-key tiles would not fit in shared memory beside q's tile), q's and k's tiles as four
//!   64-column slabs.
//! - D = 64, and a mask with a lower side (a sliding window,
//!   [`crate::passes::causal_tiles::find`]) at either D: the one-group kernel of
//!   online_wgmma_batched.hf (D = 64) or online_wgmma_d128.hf (D = 128 or 256), 64 queries a block,
//!   no producer; key tiles of 128 at D = 64 without a mask, of 64 under one. At D = 64 it
//!   is the fastest measured (H200, B = 32, S = T = 4096): 336.5 us on 128-key tiles, 368.6 us
//!   on 64-key tiles, against 383.6 us for the ping-pong form with two consumer groups on
//!   128-key tiles, 440.6 on 64-key tiles, and 656.5 us with three groups on 64-key tiles
//!   (FlashAttention-3's D = 64 choice, `registers=[32, 160]`). Under a window its key loop
//!   starts at the window, which a circular-buffered loop does not (it starts at 0), so it
//!   runs the window's tiles only. (The ping-pong kernel with the window's tiles listed by
//!   pass `mask_list` measured slower at D = 128: 262-263 us against 248 at B = 128, 2k.)
//!
//! In every form S = Q K^T and O += P V run on wgmma with P from registers and the softmax's
//! tensors sit at the tile loop. A mask on `iota`s needs nothing more here:
//! `passes::causal_tiles` bounds the key loop and masks only the boundary tiles. A mask reading
//! inputs is not classified: every key tile runs it. The score modification's and the mask's
//! tensors are computed per score in the S fragment: the named ones that read the scores at
//! the tile loop with the softmax's, those over both queries and keys from side inputs
//! (`iota`s, `broadcast(doc_q, axis=2)`) inlined into the fragment loop that reads them, and
//! those per query alone (`broadcast(slope, axis=1)`) once per block before the tile loop, a
//! row fragment each ([`SideTensors`]); a tensor per key alone is declined (no fragment holds
//! the keys alone). Guarantees: the D = 128 schedule lowers to
//! the hand examples' CUDA (`tests/tests/auto_attention.rs`), every form compiles without
//! spills at both index types.

use super::text::ScheduleText;
use super::{AutoSchedule, Facts, Scheduler};
use crate::dtype::DType;
use crate::fusion::attention::Attention;
use crate::fusion::{Fusion, Op, Operand, TensorId};
use crate::plan::SizeExpr;
use std::collections::BTreeSet;

/// Queries per consumer warp group (one wgmma M of 64 rows).
const ROWS: i64 = 64;
/// Keys per tile of the one-group kernel (a 64-key N).
const TILE: i64 = 64;

pub fn schedule(facts: &Facts, at: &Attention) -> Result<AutoSchedule, String> {
    let f = facts.fusion;
    let name = |t: TensorId| f.tensors[t].name.as_str();
    let dtype = f.tensors[at.q].dtype;
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Err(format!(
            "`{}` is attention of {} `{}`, `{}`, `{}`; its tensor-core kernel takes bf16 or f16 (wgmma): cast them, or write its schedule by hand (examples/attention/attention.hf)",
            name(at.softmax.result),
            dtype.name(),
            name(at.q),
            name(at.k),
            name(at.v)
        ));
    }
    let head_dim = |t: TensorId| {
        let axes = f.logical(t);
        f.class_extent(f.class_of(axes[axes.len() - 1]))
    };
    let d = match head_dim(at.q) {
        SizeExpr::Const(d @ (64 | 128 | 256)) => d,
        other => {
            return Err(format!(
                "`{}` has head dimension {}; the attention kernel takes a constant 64, 128 or 256 (write it in the type, `{}: {}[.., 64]`)",
                name(at.q),
                other,
                name(at.q),
                dtype.name()
            ))
        }
    };
    if head_dim(at.v) != SizeExpr::Const(d) {
        return Err(format!(
            "`{}` has head dimension {} and `{}` {}; the attention kernel takes one",
            name(at.q),
            d,
            name(at.v),
            head_dim(at.v)
        ));
    }
    let os = &at.softmax;
    if os.probs.is_none() || os.result != os.product {
        return Err(format!(
            "`{}` divides by the row sum after the product; the attention kernel takes the normalised form `p = e / broadcast(l)` before it",
            name(os.result)
        ));
    }
    if at.out == os.result {
        return Err(format!(
            "`{}` is the f32 sum of the product; the attention kernel writes it cast to {} (`cast({}, {})`)",
            name(at.out),
            dtype.name(),
            name(at.out),
            dtype.name()
        ));
    }
    let chain = product_tile(f, os.product);
    if !chain.iter().any(|&t| casts_probabilities_to(f, t, dtype)) {
        return Err(format!(
            "`{}` multiplies the probabilities in f32; wgmma takes them as a {} operand from registers: cast them (`pb = cast(p, {})`) before the broadcast",
            name(os.product),
            dtype.name(),
            dtype.name()
        ));
    }
    let side = side_tensors(f, at);
    if let Some(&t) = side.keys.first() {
        return Err(format!(
            "{} is computed per key, before a broadcast over the queries; the attention kernel computes a score modification or a mask per score in the S fragment, which holds no registers over the keys alone: broadcast per-key inputs straight to the scores' shape (`broadcast(doc_k, axis=1)`) and per-batch or per-query values through the query axis (`broadcast(broadcast(slope, axis=1), axis=2)`), or write its schedule by hand",
            f.describe(t)
        ));
    }
    let b = at.batch;
    let window = crate::passes::causal_tiles::find(f, os.scores, os.axis)
        .is_some_and(|band| band.lower.is_some());
    // At D = 64 the 128-key tiles were measured without a mask; a masked kernel keeps the
    // 64-key tiles its diagonal was measured with. A window keeps the one-group kernel, whose
    // loop starts at the window: the ping-pong kernel with the window's tiles listed (pass
    // mask_list) measured slower at D = 128 (H200, B = 128, 2k: 262-263 us against 248).
    let kernel = if window || (d == 64 && at.mask.is_some()) {
        Kernel::ONE_GROUP
    } else if d == 64 {
        Kernel::ONE_GROUP_WIDE
    } else if d == 256 {
        Kernel::PING_PONG_NARROW
    } else {
        Kernel::PING_PONG
    };
    let key_caches: Vec<TensorId> = side
        .key_inputs
        .iter()
        .copied()
        .filter(|&t| kernel.ping_pong() && tma_loadable(facts, t))
        .collect();
    let text = text(facts, at, d, kernel, &chain, &side.rows, &key_caches);
    let mask = match at.mask {
        None => String::new(),
        Some(m) if m.causal => format!(", the causal mask `{}` (key tiles past the diagonal skipped, only diagonal tiles masked)", name(m.keep)),
        Some(m) if m.on_indices && crate::passes::causal_tiles::find(f, os.scores, os.axis).is_some() => format!(", the mask `{}` (its tiles classified by passes mask_bounds and mask_tiles)", name(m.keep)),
        Some(m) if m.on_indices && crate::passes::mask_list::find(f, os.scores, os.axis).is_some() => format!(", the mask `{}` on each score in the S fragment, each block visiting only the key tiles where it may keep a pair (its bounds over the query tile and each key tile, listed before the loop by pass mask_list, the tiles it keeps whole first and without its code)", name(m.keep)),
        Some(m) if m.on_indices => format!(", the mask `{}` on each score in the S fragment (every key tile runs it: no pass bounds it per tile)", name(m.keep)),
        Some(m) if crate::passes::document_tiles::compares_ids(f, m.keep) => format!(", the document mask `{}` on each score in the S fragment, each block visiting only the key tiles whose ids' range meets its queries' (listed before the loop: pass document_tiles)", name(m.keep)),
        Some(m) => format!(", the mask `{}` on each score in the S fragment (it reads input tensors, so no key tile can be skipped or left unmasked before the kernel runs: every key tile runs the mask)", name(m.keep)),
    };
    let score_mod = at
        .score_mod
        .as_ref()
        .map(|sm| {
            format!(
                ", the scores' modification `{}` of `{}` on each score in the S fragment",
                name(sm.result),
                name(sm.scaled)
            )
        })
        .unwrap_or_default();
    let key_caches = key_caches
        .iter()
        .map(|&t| format!(", `{}` (per key) cached in shared memory beside K by the producer, its stage released once the mask has read it (TMA: its rows a multiple of 16 bytes apart, else each score loads it)", name(t)))
        .collect::<String>();
    let lse = at
        .lse
        .map(|t| {
            format!(
                ", the log-sum-exp `{}` from the running statistics",
                name(t)
            )
        })
        .unwrap_or_default();
    let kernel_why = kernel.describe(d, b, window);
    Ok(AutoSchedule {
        scheduler: Scheduler::Attention,
        text,
        reason: format!(
            "attention `{}` over {}{} {} with D = {d} {}{score_mod}{mask}{key_caches}{lse}; {kernel_why}; the online softmax, S = Q K^T and O += P V on wgmma with P from registers",
            name(at.out),
            if b == 1 { "a batch of " } else { "" },
            match (b, at.groups) {
                (1, 1) => "[B, G, S, D] (G query heads per K/V head of [B, T, D], on blockIdx.z)",
                (_, 1) => "[G, S, D] (G query heads sharing one K/V head of [T, D], on blockIdx.y)",
                (1, _) => "[B, S, D]",
                _ => "[S, D]",
            },
            dtype.name(),
            facts.sizes.describe(),
        ),
    })
}

/// The kernel the scheduler writes: how many consumer warp groups share a block's queries,
/// the key tile, and (with more than one group) the producer's register split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kernel {
    /// Consumer warp groups of [`ROWS`] queries each; 1 is the one-group kernel without a
    /// producer, more is the ping-pong + overlap kernel with a producer warp group.
    groups: i64,
    /// Keys per tile of the serial tile loop (the S product's N, the P V product's K).
    keys: i64,
    /// `setmaxnreg` for the producer and the consumer warp groups (ping-pong only).
    registers: [u32; 2],
}

impl Kernel {
    /// online_wgmma_batched.hf's and online_wgmma_d128.hf's kernel: one warp group.
    const ONE_GROUP: Kernel = Kernel {
        groups: 1,
        keys: TILE,
        registers: [0, 0],
    };
    /// The same on key tiles of 128 (D = 64 without a mask: fewer, wider tiles halve what
    /// each tile pays once, the row statistics' shuffles and O's rescale).
    const ONE_GROUP_WIDE: Kernel = Kernel {
        groups: 1,
        keys: 128,
        registers: [0, 0],
    };
    /// online_wgmma_overlap_pingpong.hf's kernel (FlashAttention-3's at D = 128): two
    /// consumer warp groups, key tiles of 128, setmaxnreg 24 / 240.
    const PING_PONG: Kernel = Kernel {
        groups: 2,
        keys: 128,
        registers: [24, 240],
    };
    /// The same on key tiles of 64, for D = 256: a group's O accumulator is 64 x 256 (128
    /// registers a thread), and q's 128 x 256 tile (64 KiB) with two stages of K's and V's
    /// 64 x 256 tiles (128 KiB) fills 192 KiB of shared memory, where 128-key tiles would need
    /// 320 KiB.
    const PING_PONG_NARROW: Kernel = Kernel {
        groups: 2,
        keys: 64,
        registers: [24, 240],
    };

    fn ping_pong(self) -> bool {
        self.groups > 1
    }

    /// The "why" line's account of the kernel: which hand example's, its groups, tiles and
    /// register split, and why it was chosen; `b` the batch axes, `window` whether the mask
    /// has a lower side.
    fn describe(self, d: i64, b: usize, window: bool) -> String {
        let slabs = if d > 64 {
            if d == 128 {
                ", q's and k's tiles as two 64-column slabs (two TMA boxes each)"
            } else {
                ", q's and k's tiles as four 64-column slabs (four TMA boxes each)"
            }
        } else {
            ""
        };
        let batch = if b == 1 {
            " (the batch on blockIdx.y)"
        } else {
            ""
        };
        if self.ping_pong() {
            let [producer, consumer] = self.registers;
            let which = if d == 128 {
                "online_wgmma_overlap_pingpong's kernel (FlashAttention-3's at D = 128, the fastest, docs/benchmarks.md)"
            } else {
                "online_wgmma_overlap_pingpong's kernel on 64-key tiles (at D = 256 two stages of 128-key tiles would not fit in shared memory)"
            };
            format!(
                "{which}: {} consumer warp groups of {ROWS} queries ({} per block{}) and a producer warp group with K and V on their own warps (setmaxnreg {producer} / {consumer}), key tiles of {} by TMA (128-byte swizzle) in two stages{slabs}, the groups taking turns issuing S_j and P_(j-1) V_(j-1), each group's softmax of tile j while its P V product runs",
                self.groups,
                ROWS * self.groups,
                if b == 1 { ", the batch on blockIdx.y" } else { "" },
                self.keys
            )
        } else {
            let which = if d > 64 {
                "online_wgmma_d128's kernel"
            } else {
                "online_wgmma_batched's kernel"
            };
            let why = if window {
                "since the mask's window starts past the first key tiles and its loop skips them only without circular buffers"
            } else {
                "the fastest measured at D = 64 (H200, B = 32, S = T = 4096: 336.5 us on 128-key tiles, against 368.6 us on 64-key tiles, 383.6 us for the ping-pong form with two groups on 128-key tiles and 656.5 us with three on 64-key tiles)"
            };
            format!(
                "{which}, one warp group without a producer, {why}: {ROWS} queries per block{batch}, key tiles of {} by TMA (128-byte swizzle){slabs}",
                self.keys
            )
        }
    }
}

/// The schedule's statements (module doc), `b` the batch axes before every position. With
/// more than one group the query tile is split once more into the groups (`g` = 1 extra axis,
/// on TIDy) and the loop positions after it shift by one.
fn text(
    facts: &Facts,
    at: &Attention,
    d: i64,
    kernel: Kernel,
    chain: &[TensorId],
    rows: &[TensorId],
    key_caches: &[TensorId],
) -> String {
    let f = facts.fusion;
    let name = |t: TensorId| f.tensors[t].name.clone();
    let b = at.batch;
    // q's, the scores' and the output's axes before the queries: the batch, then the query
    // heads of a K/V head (grouped-query attention); k and v have the batch axis only.
    let lead = b + at.groups;
    let g = usize::from(kernel.ping_pong());
    let queries = ROWS * kernel.groups;
    let keys = kernel.keys;
    // A position of the unbatched schedule; a permutation of it with the leading axes first;
    // for k's and v's boxes, with their batch axis first.
    let at_ = |i: usize| i + lead;
    let order = |perm: &[usize]| -> Vec<usize> {
        (0..lead).chain(perm.iter().map(|&i| i + lead)).collect()
    };
    let at_kv = |i: usize| i + b;
    let order_kv =
        |perm: &[usize]| -> Vec<usize> { (0..b).chain(perm.iter().map(|&i| i + b)).collect() };
    let cache = |t: TensorId| {
        let plain = format!("{}s", name(t));
        if f.tensor_by_name(&plain).is_some() {
            facts.fresh(&name(t), "s")
        } else {
            plain
        }
    };
    let (qs, ks, vs) = (cache(at.q), cache(at.k), cache(at.v));
    let sum = name(at.product);
    let o = name(at.softmax.product);
    let mut s = ScheduleText::new(&sum);
    if kernel.ping_pong() {
        s.comment("FlashAttention-3's order inside each consumer warp group: S of tile j, then P V of tile j - 1 in flight during tile j's softmax (and the other groups' products).");
        s.line(format!("online_softmax({o}, overlap=products)"));
    } else {
        s.line(format!("online_softmax({o})"));
    }
    for (c, t) in [(&qs, at.q), (&ks, at.k), (&vs, at.v)] {
        s.line(format!(
            "{c} = cache_after({}, memory=shared, load=tma, swizzle=128)",
            name(t)
        ));
    }
    let key_cache_names: Vec<String> = key_caches.iter().map(|&t| cache(t)).collect();
    for (c, &t) in key_cache_names.iter().zip(key_caches) {
        s.line(format!(
            "{c} = cache_after({}, memory=shared, load=tma)",
            name(t)
        ));
    }
    let batch = match (b, at.groups) {
        (1, 1) => "B (BIDy), G (BIDz), ",
        (1, _) => "B (BIDy), ",
        (_, 1) => "G (BIDy), ",
        _ => "",
    };
    let groups = if kernel.ping_pong() {
        format!("{} (TIDy: the consumer warp group), ", kernel.groups)
    } else {
        String::new()
    };
    s.comment(&format!(
        "{sum}[{}S, T, D] -> [{batch}S / {queries} (BIDx), T / {keys} (the serial tile loop), {groups}D / 16 (unrolled), {ROWS} (Mma M), {keys} (Mma N: the tile's keys), 16 (Mma K)]",
        ["", "B, ", "G, ", "B, G, "][b + 2 * at.groups]
    ));
    s.split(at_(0), queries, false);
    if kernel.ping_pong() {
        s.split(at_(1), ROWS, false);
    }
    s.split(at_(2 + g), keys, false);
    s.split(at_(4 + g), 16, false);
    if kernel.ping_pong() {
        s.reorder(&order(&[0, 3, 1, 5, 2, 4, 6]));
    } else {
        s.reorder(&order(&[0, 2, 4, 1, 3, 5]));
    }
    if b == 1 {
        s.parallelize(&[(0, "BIDy")]);
    }
    if at.groups == 1 {
        s.parallelize(&[(b, if b == 1 { "BIDz" } else { "BIDy" })]);
    }
    s.parallelize(&[(at_(0), "BIDx")]);
    if kernel.ping_pong() {
        s.parallelize(&[(at_(2), "TIDy")]);
    }
    s.parallelize(&[
        (at_(2 + g), "Unroll"),
        (at_(3 + g), "Mma"),
        (at_(4 + g), "Mma"),
        (at_(5 + g), "Mma"),
    ]);
    s.line(format!("propagate({sum})"));
    s.comment(&format!(
        "{o} and the tensors of its tile: the tile's {keys} keys are its K ({} unrolled x 16), M the {ROWS} queries, N = D",
        keys / 16
    ));
    // The second product's tiling, the same on each tensor of its tile.
    let product_tiling = |t: &str| {
        let mut p = ScheduleText::new(t);
        p.parallelize(&[(at_(3 + g), "Serial")]);
        p.split(at_(3 + g), 16, false);
        let mut perm: Vec<usize> = (0..2 + g).collect();
        perm.extend([3 + g, 2 + g, 5 + g, 4 + g]);
        p.reorder(&order(&perm));
        p.parallelize(&[
            (at_(2 + g), "Unroll"),
            (at_(3 + g), "Mma"),
            (at_(4 + g), "Mma"),
            (at_(5 + g), "Mma"),
        ]);
        p
    };
    s.append(product_tiling(&o));
    let mut out = ScheduleText::new(&name(at.out));
    out.parallelize(&[(at_(2 + g), "Mma")]);
    s.append(out);
    for &t in chain {
        s.append(product_tiling(&name(t)));
    }
    s.comment(if kernel.ping_pong() {
        "The TMA boxes: q's tile once per block (one copy for every group, each group's wgmma reads its rows), k's and v's per key tile."
    } else {
        "The TMA boxes: q's tile once per block, k's and v's per key tile."
    });
    s.append(q_box(&qs, d, g, &at_, &order));
    kv_boxes(&mut s, &ks, &vs, d, &at_kv, &order_kv);
    for c in &key_cache_names {
        let mut key_box = ScheduleText::new(c);
        key_box.parallelize(&[(at_kv(1), "Bulk")]);
        s.append(key_box);
    }
    if kernel.ping_pong() {
        ping_pong_pipelines(&mut s, kernel, [&ks, &vs], &key_cache_names);
    }
    s.line("inline_most()".into());
    place_tile_tensors(&mut s, f, at, chain, rows, at_(2 + g), at_(1));
    s.finish()
}

/// The ping-pong kernel's circular buffers: K's and V's stages, each on its own producer warp,
/// the per-key caches `keys` in K's stages; the consumer groups take turns issuing products.
fn ping_pong_pipelines(s: &mut ScheduleText, kernel: Kernel, [ks, vs]: [&str; 2], keys: &[String]) {
    let [producer, consumer] = kernel.registers;
    s.comment(&format!("K and V in circular buffers of two stages, each filled by its own warp of the producer warp group (TIDy = {}) while the consumer warp groups compute on each stage; the groups take turns issuing their products (turns=products): S_j and P_(j-1) V_(j-1) in one turn.", kernel.groups));
    let ws = format!("warp_specialized(TIDy, registers=[{producer}, {consumer}]");
    s.line(format!("{ks}.circular_buffer(2, {ws}, turns=products))"));
    if !keys.is_empty() {
        s.comment("The per-key inputs the mask reads, one box of the tile's keys per stage: in K's stages, filled by K's warp.");
    }
    for c in keys {
        s.line(format!("{c}.circular_buffer(2, {ws}, turns=products))"));
    }
    s.line(format!(
        "{vs}.circular_buffer(2, {ws}, warp=1, turns=products))"
    ));
}

/// After `inline_most()`: the softmax's tensors (with the score modification's and the mask's
/// that read the scores) at the tile loop, position `tile` of their loops; the per-query side
/// tensors `rows` ([`SideTensors`]) before it, position `block` (the batch and the query tile).
fn place_tile_tensors(
    s: &mut ScheduleText,
    f: &Fusion,
    at: &Attention,
    chain: &[TensorId],
    rows: &[TensorId],
    tile: usize,
    block: usize,
) {
    let name = |t: TensorId| f.tensors[t].name.as_str();
    s.comment(
        "The softmax's tensors at the tile loop, each in its own loops over the fragment (M, N).",
    );
    for t in softmax_tile(f, at, chain) {
        s.line(format!("{}.inline_at({tile})", name(t)));
    }
    if !rows.is_empty() {
        s.comment("The per-query values the scores' modification or mask reads, once per block before the tile loop: a row fragment (the thread's two rows) each.");
        for &t in rows {
            s.line(format!("{}.inline_at({block})", name(t)));
        }
    }
}

/// k's and v's TMA boxes per key tile, `at_kv` and `order_kv` their positions with the batch
/// axis first: at D > 64 in 64-column slabs of 128 bytes (k's split from its D tiles, v's
/// from its columns), one box each.
fn kv_boxes(
    s: &mut ScheduleText,
    ks: &str,
    vs: &str,
    d: i64,
    at_kv: &dyn Fn(usize) -> usize,
    order_kv: &dyn Fn(&[usize]) -> Vec<usize>,
) {
    let mut k_box = ScheduleText::new(ks);
    if d > 64 {
        // 64-column slabs of 128 bytes (two at D = 128, four at 256), one box each.
        k_box.parallelize(&[(at_kv(1), "Serial")]);
        k_box.split(at_kv(1), 4, false);
        k_box.reorder(&order_kv(&[0, 1, 3, 2, 4]));
        k_box.parallelize(&(1..5).map(|i| (at_kv(i), "Bulk")).collect::<Vec<_>>());
    } else {
        k_box.reorder(&order_kv(&[0, 2, 1, 3]));
        k_box.parallelize(&(1..4).map(|i| (at_kv(i), "Bulk")).collect::<Vec<_>>());
    }
    s.append(k_box);
    let mut v_box = ScheduleText::new(vs);
    if d > 64 {
        v_box.split(at_kv(2), 64, false);
        v_box.reorder(&order_kv(&[0, 2, 1, 3]));
        v_box.parallelize(&(1..4).map(|i| (at_kv(i), "Bulk")).collect::<Vec<_>>());
    } else {
        v_box.parallelize(&(1..3).map(|i| (at_kv(i), "Bulk")).collect::<Vec<_>>());
    }
    s.append(v_box);
}

/// q's TMA box: the block's query tile once (with several groups, the groups' axis inside the
/// box: one copy for all). At D = 128 two 64-column slabs of 128 bytes, one box each.
fn q_box(
    qs: &str,
    d: i64,
    g: usize,
    at_: &dyn Fn(usize) -> usize,
    order: &dyn Fn(&[usize]) -> Vec<usize>,
) -> ScheduleText {
    let mut q = ScheduleText::new(qs);
    let bulk = |last: usize| (1..last).map(|i| (at_(i), "Bulk")).collect::<Vec<_>>();
    match (d > 64, g == 1) {
        // [So, Do, Si, Di] -> [So, Do / 4, Si, 4, Di]
        (true, false) => {
            q.parallelize(&[(at_(1), "Serial")]);
            q.split(at_(1), 4, false);
            q.reorder(&order(&[0, 1, 3, 2, 4]));
            q.parallelize(&bulk(5));
        }
        // [So, Sg, Do, Si, Di] -> [So, Do / 4, Sg, Si, 4, Di]
        (true, true) => {
            q.parallelize(&[(at_(2), "Serial")]);
            q.split(at_(2), 4, false);
            q.reorder(&order(&[0, 2, 1, 4, 3, 5]));
            q.parallelize(&bulk(6));
        }
        // [So, Do, Si, Di] -> [So, Si, Do, Di]
        (false, false) => {
            q.reorder(&order(&[0, 2, 1, 3]));
            q.parallelize(&bulk(4));
        }
        // [So, Sg, Do, Si, Di] -> [So, Sg, Si, Do, Di]
        (false, true) => {
            q.reorder(&order(&[0, 1, 3, 2, 4]));
            q.parallelize(&bulk(5));
        }
    }
    q
}

/// The tensors the second product reads in its tile (rank of its input, not fusion inputs):
/// the product `p v` itself, then breadth first the casts and broadcasts of its factors.
fn product_tile(f: &Fusion, product: TensorId) -> Vec<TensorId> {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let Some(first) = def(product).and_then(|x| x.input_tensors().next()) else {
        return Vec::new();
    };
    let rank = f.rank(first);
    let mut tile = vec![first];
    let mut next = 0;
    while next < tile.len() {
        let t = tile[next];
        next += 1;
        let Some(x) = def(t) else { continue };
        if !matches!(
            x.op,
            Op::Binary(crate::fusion::BinaryOp::Mul) | Op::Cast(_) | Op::Broadcast { .. } | Op::Set
        ) {
            continue;
        }
        for i in x.input_tensors() {
            if !f.tensors[i].is_input && f.rank(i) == rank && !tile.contains(&i) {
                tile.push(i);
            }
        }
    }
    tile
}

/// Whether `t` (of the product's tile) reads the probabilities through a cast to `dtype`.
fn casts_probabilities_to(f: &Fusion, t: TensorId, dtype: DType) -> bool {
    let def = |t: TensorId| f.tensors[t].definition.map(|d| &f.exprs[d]);
    let Some(x) = def(t) else { return false };
    let Some(i) = x.input_tensors().next() else {
        return false;
    };
    matches!(x.op, Op::Broadcast { .. }) && def(i).is_some_and(|c| c.op == Op::Cast(dtype))
}

/// The tensors of the softmax the program names (the scores, the masked scores, the row
/// maximum, the exponentials, the row sum, the probabilities and their cast), in the fusion's
/// order: those computed from the scores' product that the second product reads, outside its
/// tile. Each is placed at the key-tile loop.
fn softmax_tile(f: &Fusion, at: &Attention, chain: &[TensorId]) -> Vec<TensorId> {
    let from_scores = f.computed_from([at.product]);
    let mut read_by_product = BTreeSet::new();
    let mut stack: Vec<TensorId> = chain.to_vec();
    while let Some(t) = stack.pop() {
        if !read_by_product.insert(t) {
            continue;
        }
        if let Some(x) = f.tensors[t].definition.map(|d| &f.exprs[d]) {
            stack.extend(x.inputs.iter().filter_map(|o| match o {
                Operand::Tensor(i) => Some(*i),
                _ => None,
            }));
        }
    }
    f.tensor_ids()
        .filter(|&t| {
            t != at.product
                && !chain.contains(&t)
                && from_scores[t]
                && read_by_product.contains(&t)
                && f.tensors[t].written.is_none()
                && !f.tensors[t].is_input
        })
        .collect()
}

/// The tensors the score modification and the mask compute from their side inputs (the
/// scalars, `iota`s and input tensors they read, not the scores), by shape.
#[derive(Debug, Default, PartialEq)]
struct SideTensors {
    /// Per query, not per key (`broadcast(slope, axis=1)`, `[B, S]`): each placed once per
    /// block before the tile loop, a row fragment of the thread's two rows.
    rows: Vec<TensorId>,
    /// Per key, not per query (`[B, T]`): the kernel has no fragment over the tile's keys
    /// alone, so the scheduler declines them.
    keys: Vec<TensorId>,
    /// The fusion inputs over the batch and the keys alone (`doc_k: i32[B, T]`) read: each
    /// score's read of them was a global load after S's wait, so the ping-pong kernel caches
    /// them in shared memory, one key tile per stage of K's pipeline, where TMA can load them
    /// ([`tma_loadable`]; a document mask, docs/benchmarks.md, seventeenth session).
    key_inputs: Vec<TensorId>,
}

/// Whether TMA can load input `t` by tiles of keys: its key extent known, its rows a multiple
/// of 16 bytes apart (else each score keeps its load).
fn tma_loadable(facts: &Facts, t: TensorId) -> bool {
    let f = facts.fusion;
    let bytes = i64::from(f.tensors[t].dtype.size_bytes());
    f.logical(t)
        .last()
        .and_then(|&key| facts.extent(key))
        .is_some_and(|n| (n * bytes) % 16 == 0)
}

/// The [`SideTensors`] of `at`'s score modification and mask, in the fusion's order. Those
/// over both the queries and the keys (`dist`, `broadcast(doc_q, axis=2)`) need nothing:
/// `inline_most` computes them in the fragment loop of the tensor that reads them, per score.
/// Nor do those over neither: a 0-dim one (`1.0 / cap`) is computed once at the top of the
/// kernel (`loop_nest` places it outside every loop), a per-batch one (`slope * 0.5`, `[B]`)
/// with the per-query row fragment that reads it.
fn side_tensors(f: &Fusion, at: &Attention) -> SideTensors {
    let scores = f.computed_from([at.product]);
    let mut stack: Vec<TensorId> = at.mask.map(|m| m.keep).into_iter().collect();
    if let Some(sm) = &at.score_mod {
        stack.extend(sm.path.iter().flat_map(|&d| f.exprs[d].input_tensors()));
    }
    let (mut side, mut inputs) = (BTreeSet::new(), BTreeSet::new());
    while let Some(t) = stack.pop() {
        if scores[t] {
            continue;
        }
        if f.tensors[t].is_input {
            inputs.insert(t);
        } else if side.insert(t) {
            if let Some(d) = f.tensors[t].definition {
                stack.extend(f.exprs[d].input_tensors());
            }
        }
    }
    let axes = f.logical(at.softmax.scores);
    let query = f.class_of(axes[axes.len() - 2]);
    let key = f.class_of(at.softmax.axis);
    let has = |t: TensorId, class| f.logical(t).iter().any(|&a| f.class_of(a) == class);
    SideTensors {
        rows: side
            .iter()
            .copied()
            .filter(|&t| has(t, query) && !has(t, key))
            .collect(),
        keys: side
            .iter()
            .copied()
            .filter(|&t| has(t, key) && !has(t, query))
            .collect(),
        key_inputs: inputs
            .into_iter()
            .filter(|&t| {
                let logical = f.logical(t);
                logical.len() == at.batch + 1
                    && logical.last().is_some_and(|&a| f.class_of(a) == key)
                    && !has(t, query)
            })
            .collect(),
    }
}
