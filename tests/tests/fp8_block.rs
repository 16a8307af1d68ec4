//! Block-scaled FP8 products (DeepSeek-V3: 1 x 128 activation scales, 128 x 128 weight scales):
//! the `expand_blocks` view the scales are written with (its reference, twin, launch check and
//! errors), the two-level accumulation of `examples/matmul/step18_fp8_block.hf` (wgmmas into a
//! block accumulator per 128-wide K block, promoted into the f32 accumulator with the block's
//! scales), its overlapped form (`step18_fp8_block_overlap.hf`: the promotion of block k - 1
//! while block k's wgmmas run, checked by running the kernel IR's k loop on the host), the
//! errors of scales whose blocks do not match the schedule's K tile, a quantized e4m3 output,
//! and its amax in the product's kernel (`step19_fp8_out_amax.hf`: a grid reduction over the
//! consumer threads; refused where its axes are not bound to the blocks as the product's).

use hopfuse::DType;
use hopfuse_tests::{compile, error, example, fp8_values};
use std::collections::BTreeMap;

const STEP18: &str = "matmul/step18_fp8_block.hf";
const OVERLAP: &str = "matmul/step18_fp8_block_overlap.hf";

fn edit(src: &str, from: &str, to: &str) -> String {
    assert!(src.contains(from), "`{from}` is not in the program");
    src.replacen(from, to, 1)
}

fn sizes(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn expand_blocks_repeats_each_element_over_its_block() {
    let src = "fusion f {\n  input x: f32[R, C]\n  input y: f32[M, N]\n  c = expand_blocks(x, block=[2, 3], shape=[M, N]) + y\n  output c\n}\n";
    let f = hopfuse::reference_fusion(src).unwrap();
    // x[2, 2] = [[0, 1], [2, 3]] over a 3 x 5 result: rows 0-1 read x's row 0, row 2 its row
    // 1; columns 0-2 x's column 0, 3-4 its column 1.
    let inputs = BTreeMap::from([
        ("x".to_string(), vec![0.0, 1.0, 2.0, 3.0]),
        ("y".to_string(), vec![0.0; 15]),
    ]);
    let c = hopfuse::backend::reference::evaluate(
        &f,
        &sizes(&[("R", 2), ("C", 2), ("M", 3), ("N", 5)]),
        &inputs,
    )
    .unwrap()["c"]
        .clone();
    assert_eq!(
        c,
        [0., 0., 0., 1., 1., 0., 0., 0., 1., 1., 2., 2., 2., 3., 3.]
    );
    // The kernel reads x at the block of each index.
    let cuda = hopfuse::compile(src, &Default::default()).unwrap().cuda;
    assert!(cuda.contains("/ 2 * C + "), "{cuda}");
    assert!(cuda.contains("/ 3]"), "{cuda}");
    // The twin writes what a PyTorch user does.
    let twin = hopfuse::torch_twin(src).unwrap().source;
    assert!(
        twin.contains(
            "x.repeat_interleave(2, 0).repeat_interleave(3, 1)[:y.shape[0], :y.shape[1]]"
        ),
        "{twin}"
    );
}

#[test]
fn expand_blocks_checks_that_the_input_covers_the_shape() {
    let src = "fusion f {\n  input sa: f32[M, KB]\n  input a: f32[M, K]\n  c = a * expand_blocks(sa, block=[1, 128], shape=[M, K])\n  output c\n}\n";
    let plan = hopfuse::compile(src, &Default::default()).unwrap().plan;
    let at = |kb: i64, k: i64| sizes(&[("M", 4), ("KB", kb), ("K", k)]);
    // ceilDiv(K, 128) blocks: 2 cover K = 129 .. 256, not 257.
    assert!(plan.concretize(&at(2, 256)).is_ok());
    assert!(plan.concretize(&at(2, 129)).is_ok());
    let e = plan.concretize(&at(2, 257)).unwrap_err().to_string();
    assert!(
        e.contains("`expand_blocks` of `sa`: its KB blocks of 128 along axis 1 must cover K (ceilDiv(K, 128) <= KB)"),
        "{e}"
    );
    let f = hopfuse::reference_fusion(src).unwrap();
    let inputs = BTreeMap::from([
        ("sa".to_string(), vec![0.0; 8]),
        ("a".to_string(), vec![0.0; 4 * 257]),
    ]);
    let e = hopfuse::backend::reference::evaluate(&f, &at(2, 257), &inputs).unwrap_err();
    assert!(e.contains("must cover K"), "{e}");
}

#[test]
fn expand_blocks_errors_name_the_argument() {
    let program = |call: &str| {
        format!("fusion f {{\n  input sa: f32[M, KB]\n  input a: f32[M, K]\n  input n: f32[M, 2]\n  c = a * {call}\n  output c\n}}\n")
    };
    for (call, want) in [
        (
            "expand_blocks(sa, block=[1, 128])",
            "5:11: error: `expand_blocks` needs `shape=[...]`, an extent for every axis of `sa`",
        ),
        (
            "expand_blocks(sa, block=[128], shape=[M, K])",
            "5:29: error: `block=` has 1 entries and `sa` has rank 2",
        ),
        (
            "expand_blocks(sa, block=[1, 0], shape=[M, K])",
            "5:39: error: a block size is a positive integer",
        ),
        (
            "expand_blocks(sa, block=[1, 128], shape=[K, K])",
            "5:52: error: axis 0 of `sa` has block 1 and extent M, so its shape entry is M, not K",
        ),
        (
            "expand_blocks(n, block=[1, 4], shape=[M, 9])",
            "5:52: error: `n` has 2 blocks of 4 along axis 1, fewer than the 9 elements of the shape",
        ),
        (
            "expand_blocks(sa * 2.0, block=[1, 128], shape=[M, K])",
            "`expand_blocks` reads a fusion input",
        ),
    ] {
        let src = program(call);
        let e = error(&src);
        assert!(e.contains(want), "{call}:\n{e}");
    }
}

#[test]
fn step18_reference_is_the_product_of_the_dequantized_operands() {
    for path in [STEP18, OVERLAP] {
        step18_reference_at_a_ragged_size(path);
    }
}

fn step18_reference_at_a_ragged_size(path: &str) {
    let src = example(path);
    let f = hopfuse::reference_fusion(&src).unwrap_or_else(|e| panic!("{}", e.render(&src, path)));
    // Ragged: K = 300 in 3 blocks (the last of 44), N = 130 in 2 blocks (the last of 2).
    let (m, n, k, kb, nb) = (3usize, 130usize, 300usize, 3usize, 2usize);
    let a = fp8_values(m * k, 1);
    let b = fp8_values(n * k, 2);
    let sa: Vec<f64> = (0..m * kb).map(|i| 0.5 + 0.25 * i as f64).collect();
    let sb: Vec<f64> = (0..nb * kb).map(|i| 2.0 - 0.125 * i as f64).collect();
    let inputs = BTreeMap::from([
        ("a".to_string(), a.clone()),
        ("b".to_string(), b.clone()),
        ("sa".to_string(), sa.clone()),
        ("sb".to_string(), sb.clone()),
    ]);
    let at = sizes(&[
        ("M", m as i64),
        ("N", n as i64),
        ("K", k as i64),
        ("KB", kb as i64),
        ("NB", nb as i64),
    ]);
    let got = hopfuse::backend::reference::evaluate(&f, &at, &inputs).unwrap()["c"].clone();
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|kk| {
                    let (ad, bd) = (
                        a[i * k + kk] * sa[i * kb + kk / 128],
                        b[j * k + kk] * sb[j / 128 * kb + kk / 128],
                    );
                    // (The f32 products of the program: exact here.)
                    DType::F32.round(ad) * DType::F32.round(bd)
                })
                .sum();
            assert_eq!(
                got[i * n + j],
                DType::BF16.round(dot),
                "{path}: c[{i}, {j}]"
            );
        }
    }
}

#[test]
fn step18_promotes_each_k_block_into_the_f32_accumulator() {
    let c = compile(&example(STEP18));
    let cuda = &c.cuda;
    // The wgmmas write the block accumulator, a second array of the main one's 64 registers.
    assert!(cuda.contains("float s_acc[64];"), "{cuda}");
    assert!(cuda.contains("float s_acc_block[64];"), "{cuda}");
    assert!(
        cuda.contains("hf_wgmma_m64n128k32_e4m3_e4m3(&s_acc_block[0], "),
        "{cuda}"
    );
    assert!(
        !cuda.contains("hf_wgmma_m64n128k32_e4m3_e4m3(&s_acc[0], "),
        "{cuda}"
    );
    // Each block starts its sum afresh (scale-d off on its first wgmma) ...
    let k_loop = cuda
        .find("for (index_t k_o = 0; k_o < hf_ceil_div<index_t>(K, 128); ++k_o) {")
        .expect("the consumers' k loop");
    let reset = cuda[k_loop..]
        .find("s_acc_block_started[0] = 0;")
        .map(|i| i + k_loop)
        .expect("the block's flag reset");
    let first_wgmma = cuda[k_loop..]
        .find("hf_wgmma_m64n128k32")
        .map(|i| i + k_loop)
        .unwrap();
    assert!(reset < first_wgmma, "{cuda}");
    // ... and after its wgmmas have completed (no group left in flight), each thread adds its
    // registers times the scales of their rows (sa[m, k / 128]) and columns (sb[n / 128, k /
    // 128]) into the f32 accumulator.
    let wait = cuda[first_wgmma..]
        .find("hf_wgmma_wait<0>();")
        .map(|i| i + first_wgmma)
        .unwrap();
    // The scales' product first (one FFMA a register), from the scale registers loaded at
    // the block's start ...
    let promote = cuda
        .find("s_acc[r3] = s_acc[r3] + (s_acc_block[r3] * (s_acc_block_sa[r3] * s_acc_block_sb[r3]));")
        .expect("the promotion");
    assert!(wait < promote, "{cuda}");
    assert!(!cuda.contains("hf_wgmma_wait<1>"), "{cuda}");
    // No guard between the register loop and the update.
    assert!(
        cuda[..promote]
            .trim_end()
            .ends_with("for (index_t r3 = 0; r3 < 64; ++r3) {"),
        "{cuda}"
    );
    // ... each scale read clamped into its tensor (no bounds guard: ptxas loads each once,
    // unpredicated), the weight block's scale at the tile's first column (one per 128 x 128
    // block: the same for the whole tile), before the stage is waited for: the loads are in
    // flight while the block's wgmmas run, none after a `wait_group`.
    let stage_wait = cuda[k_loop..]
        .find("hf_mbarrier_wait(&a_s_b_s_full[")
        .map(|i| i + k_loop)
        .unwrap();
    for load in [
        "s_acc_block_sa[r2] = sa[hf_min<index_t>((tile_v0 + (m_io * 64 + ",
        "* KB + k_o * 128 / 128, M * KB - 1)];",
        "s_acc_block_sb[r2] = sb[hf_min<index_t>(tile_v1 + k_o * 128 / 128, NB * KB - 1)];",
    ] {
        let at = cuda[k_loop..]
            .find(load)
            .map(|i| i + k_loop)
            .unwrap_or_else(|| panic!("`{load}`\n{cuda}"));
        assert!(at < reset && reset < stage_wait, "{load}\n{cuda}");
    }
    assert_eq!(cuda.matches(" = sa[").count(), 1, "{cuda}");
    assert!(cuda.contains("float s_acc_block_sa[64];"), "{cuda}");
    // The main accumulator is zero-filled (no wgmma starts it) and is what the epilogue stores.
    assert!(cuda.contains("s_acc[r] = 0.0f;"), "{cuda}");
    assert!(cuda.contains("= hf_float_to_bf16(s_acc["), "{cuda}");
}

/// Step 18 with the activation scales' block along K `block` wide (sa: f32[M, KB]).
fn step18_with_a_block(block: i64) -> String {
    edit(
        &example(STEP18),
        "expand_blocks(sa, block=[1, 128], shape=[M, K])",
        &format!("expand_blocks(sa, block=[1, {block}], shape=[M, K])"),
    )
}

#[test]
fn a_block_narrower_than_the_k_tile_is_an_error_that_names_the_scale() {
    // 64-wide blocks change inside the 128-wide K tile (its unrolled k32 steps).
    let e = error(&step18_with_a_block(64));
    assert!(
        e.contains("error: `s`: the scale `sa` (expand_blocks(sa, block=[1, 64])) changes inside the schedule's K tile (128 elements of K, loop `k_io` is Unroll): its blocks along K must be at least as wide as the K tile, each tile inside one block, so that the tensor cores sum a whole tile before it is scaled; split K by the block size (or a divisor of it) for the K tile"),
        "{e}"
    );
    // 16-wide blocks change inside one wgmma.
    let e = error(&step18_with_a_block(16));
    assert!(
        e.contains("error: `s`: the scale `sa` (expand_blocks(sa, block=[1, 16])) varies along K inside one wgmma (K = 32)"),
        "{e}"
    );
}

#[test]
fn blocks_wider_than_the_k_tile_are_promoted_every_tile() {
    // 256-wide blocks: constant along each 128-wide tile, so each tile is promoted (twice per
    // block), which is exact: the sum of a block is the sum of its tiles.
    let c = compile(&step18_with_a_block(256));
    assert!(
        c.cuda.contains("* KB + k_o * 128 / 256, M * KB - 1)];"),
        "{}",
        c.cuda
    );
}

#[test]
fn step18_twin_dequantizes_then_multiplies() {
    let twin = hopfuse::torch_twin(&example(STEP18)).unwrap().source;
    assert!(
        twin.contains("ad = a.float() * sa.repeat_interleave(128, 1)[:, :a.shape[1]]"),
        "{twin}"
    );
    assert!(
        twin.contains(
            "bd = b.float() * sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:b.shape[0], :a.shape[1]]"
        ),
        "{twin}"
    );
}

#[test]
fn a_one_warp_group_block_scaled_product_promotes_inside_its_k_loop() {
    // Step 1 (no warp specialization: a block barrier frees the stage) on e4m3 with the
    // block scales: the promotion follows the barrier at the end of each k step.
    let step1 = example("matmul/step1_one_warp_group.hf");
    let src = edit(
        &edit(
            &edit(
                &edit(
                    &step1,
                    "  input a: bf16[M, K]\n  input b: bf16[N, K]\n  ab = cast(broadcast(a, axis=1), f32)\n  bb = cast(broadcast(b, axis=0), f32)",
                    "  input a: f8e4m3[M, K]\n  input b: f8e4m3[N, K]\n  input sa: f32[M, KB]\n  input sb: f32[NB, KB]\n  ab = cast(broadcast(a, axis=1), f32) * broadcast(expand_blocks(sa, block=[1, 128], shape=[M, K]), axis=1)\n  bb = cast(broadcast(b, axis=0), f32) * broadcast(expand_blocks(sb, block=[128, 128], shape=[N, K]), axis=0)",
                ),
                "s.split(4, 64)",
                "s.split(4, 128)",
            ),
            "s.split(5, 16)",
            "s.split(5, 32)",
        ),
        "// bench: M=4096,N=4096,K=4096",
        "// bench: M=4096,N=4096,K=4096,KB=32,NB=32",
    );
    let cuda = compile(&src).cuda;
    let k_loop = cuda
        .find("for (index_t k_o = 0; k_o < hf_ceil_div<index_t>(K, 128); ++k_o) {")
        .expect("the k loop");
    let barrier = cuda[k_loop..].find("__syncthreads();").unwrap() + k_loop;
    let promote = cuda
        .find("s_acc[r3] = s_acc[r3] + (s_acc_block[r3] * (s_acc_block_sa[r3] * s_acc_block_sb[r3]));")
        .expect("the promotion");
    let epilogue = cuda.find("hf_float_to_bf16(s_acc[").expect("the epilogue");
    assert!(
        k_loop < barrier && barrier < promote && promote < epilogue,
        "{cuda}"
    );
}

#[test]
fn step18_overlap_promotes_each_block_while_the_next_one_runs() {
    let cuda = compile(&example(OVERLAP)).cuda;
    // Two halves of 32 registers (64 x 64 per warp group) beside the f32 accumulator.
    for decl in [
        "float s_acc[32];",
        "float s_acc_block[64];",
        "int s_acc_block_started[2];",
    ] {
        assert!(cuda.contains(decl), "{decl}\n{cuda}");
    }
    // Four blocks per iteration, block j's wgmmas into half j % 2 ...
    let outer = cuda
        .find("for (index_t k_oo = 0; k_oo < hf_ceil_div<index_t>(hf_ceil_div<index_t>(K, 128), 4); ++k_oo) {")
        .expect("the loop over four blocks");
    let order = [
        "for (index_t k_oi = 0; k_oi < 4; ++k_oi) {",
        "const index_t k_o = k_oo * 4 + k_oi;",
        "if (k_o < hf_ceil_div<index_t>(K, 128)) {",
        // (block k_o's scales into the half's registers, before the stage is waited for)
        "s_acc_block_sa[r2 + k_oi % 2 * 32] = sa[hf_min<index_t>(",
        "* KB + k_o * 128 / 128, M * KB - 1)];",
        "s_acc_block_sb[r2 + k_oi % 2 * 32] = sb[hf_min<index_t>(tile_v1 + k_o * 128 / 128, NB * KB - 1)];",
        "s_acc_block_started[k_oi % 2] = 0;",
        "hf_mbarrier_wait(&a_s_b_s_full[",
        "hf_wgmma_m64n64k32_e4m3_e4m3(&s_acc_block[k_oi % 2 * 32], ",
        "hf_wgmma_commit();",
        // ... then the previous block's group is waited for while this one runs, its stage
        // released and its half promoted with its own scales ...
        "if (0 < k_oi) {",
        "hf_wgmma_wait<1>();",
        "if (k_o - 1 < hf_ceil_div<index_t>(K, 128)) {",
        "hf_mbarrier_arrive_per_warp(&a_s_b_s_empty[(tile * hf_ceil_div<index_t>(K, 128) + (k_o - 1)) % 4]);",
        "s_acc[r3] = s_acc[r3] + (s_acc_block[r3 + (k_oi - 1) % 2 * 32] * (s_acc_block_sa[r3 + (k_oi - 1) % 2 * 32] * s_acc_block_sb[r3 + (k_oi - 1) % 2 * 32]));",
        // ... and the fourth block of an iteration after its group has completed.
        "hf_wgmma_wait<0>();",
        "if (k_oo * 4 + 3 < hf_ceil_div<index_t>(K, 128)) {",
        "hf_mbarrier_arrive_per_warp(&a_s_b_s_empty[(tile * hf_ceil_div<index_t>(K, 128) + (k_oo * 4 + 3)) % 4]);",
        "s_acc[r3] = s_acc[r3] + (s_acc_block[r3 + 32] * (s_acc_block_sa[r3 + 32] * s_acc_block_sb[r3 + 32]));",
        "= hf_float_to_bf16(s_acc[",
    ];
    let mut at = outer;
    for want in order {
        at += cuda[at..]
            .find(want)
            .unwrap_or_else(|| panic!("`{want}` after byte {at}:\n{cuda}"));
    }
    assert_eq!(cuda.matches("hf_wgmma_wait<0>();").count(), 1, "{cuda}");
    // The scale registers have two halves too; the scales are read from global memory only
    // at the block's start.
    assert!(cuda.contains("float s_acc_block_sa[64];"), "{cuda}");
    assert_eq!(cuda.matches(" = sa[").count(), 1, "{cuda}");
}

/// The buffers `run_overlapped_k_loop` follows.
struct Bufs {
    blk: usize,
    sa: usize,
    sa_ahead: usize,
}
/// The state of `run_overlapped_k_loop`'s host run.
struct Run {
    env: BTreeMap<String, i64>,
    blocks: i64,
    uncommitted: Vec<(i64, i64)>,
    groups: Vec<Vec<(i64, i64)>>,
    /// The block each half holds, once its group has completed.
    done: [Option<i64>; 2],
    /// The block of `sa` each half of the scale registers holds.
    scales: [Option<i64>; 2],
    promoted: Vec<i64>,
}
fn eval(run: &Run, v: &hopfuse::kir::Val) -> i64 {
    use hopfuse::kir::Val;
    v.eval_with(&|leaf| match leaf {
        Val::Var(n) | Val::Size(n) => run.env.get(n).copied().or(Some(0)),
        _ => Some(0),
    })
    .unwrap_or_else(|| panic!("{}", v.text()))
}
/// Runs `body` for thread 0 (see `run_overlapped_k_loop`).
fn exec(run: &mut Run, body: &[hopfuse::kir::Stmt], bufs: &Bufs) {
    use hopfuse::kir::Stmt;
    for s in body {
        match s {
            // (A thread binding: thread 0's iteration; a loop: every iteration.)
            Stmt::Loop(l) if l.parallel.is_hw() => {
                run.env.insert(l.var.clone(), 0);
                exec(run, &l.body, bufs);
            }
            Stmt::Loop(l) => {
                for i in 0..eval(run, &l.extent) {
                    run.env.insert(l.var.clone(), i);
                    exec(run, &l.body, bufs);
                }
            }
            Stmt::If { cond, then, els } => {
                let body = if eval(run, cond) != 0 { then } else { els };
                exec(run, body, bufs);
            }
            Stmt::Let { var, value, .. } => {
                let v = eval(run, value);
                run.env.insert(var.clone(), v);
            }
            Stmt::Wgmma(w) if w.acc.buffer.index() == bufs.blk => {
                let half = eval(run, w.acc.index.as_ref().unwrap()) / 32;
                let block = run.env["k_o"];
                run.uncommitted.push((half, block));
            }
            Stmt::WgmmaCommit => {
                let g = std::mem::take(&mut run.uncommitted);
                run.groups.push(g);
            }
            Stmt::WgmmaWait(n) => {
                while run.groups.len() > *n as usize {
                    for (half, block) in run.groups.remove(0) {
                        run.done[half as usize] = Some(block);
                    }
                }
            }
            // A scale loaded ahead: the block of `sa` it reads (at register 0, row 0: the
            // index is the block of K), which must be one of the tensor's.
            Stmt::Compute(c) if c.out.buffer.index() == bufs.sa_ahead => {
                let register = eval(run, c.out.index.as_ref().unwrap());
                if register % 32 != 0 {
                    continue;
                }
                let mut block = None;
                c.value.for_each_read(&mut |a| {
                    if a.buffer.index() == bufs.sa {
                        block = Some(eval(run, a.index.as_ref().unwrap()));
                    }
                });
                let b = block.expect("the scale registers hold `sa`");
                assert!(b < run.blocks, "a load of block {b} of {}", run.blocks);
                run.scales[(register / 32) as usize] = Some(b);
            }
            Stmt::Compute(c) => {
                let mut half = None;
                let mut register = None;
                let mut scale_half = None;
                c.value.for_each_read(&mut |a| {
                    let at = || eval(run, a.index.as_ref().unwrap());
                    if a.buffer.index() == bufs.blk {
                        half = Some(at() / 32);
                        register = Some(at() % 32);
                    }
                    if a.buffer.index() == bufs.sa_ahead {
                        scale_half = Some(at() / 32);
                    }
                    assert_ne!(a.buffer.index(), bufs.sa, "a promotion reads `sa`");
                });
                // Once per promotion: count it at register 0.
                if let (Some(h), Some(0), Some(sh)) = (half, register, scale_half) {
                    let b = run.scales[sh as usize].expect("scales loaded");
                    let in_flight = run.groups.iter().flatten().chain(&run.uncommitted);
                    assert!(
                        !in_flight.into_iter().any(|&(x, _)| x == h),
                        "block {b}'s promotion reads half {h} while a group writes it"
                    );
                    assert_eq!(run.done[h as usize], Some(b), "half {h}");
                    run.promoted.push(b);
                }
            }
            other => {
                for child in other.children() {
                    exec(run, child, bufs);
                }
            }
        }
    }
}

/// The overlapped k loop of step 18, run on the host for `blocks` blocks of K: wgmma groups
/// (each the halves of the block accumulator its wgmmas write, tagged with their block),
/// `wait_group n` retiring all but the newest `n`, the scales loaded ahead into the halves of
/// the scale registers (tagged with the block of `sa` they read, checked to be inside `sa`),
/// and each promotion checked to read a half whose group has completed and to apply the scales
/// of the block that half holds.
fn run_overlapped_k_loop(kernel: &hopfuse::kir::Kernel, blocks: i64) -> Vec<i64> {
    use hopfuse::kir::Stmt;
    let find = |name: &str| {
        kernel
            .buffers
            .iter()
            .position(|b| b.name == name)
            .unwrap_or_else(|| panic!("no buffer `{name}`"))
    };
    let bufs = Bufs {
        blk: find("s_acc_block"),
        sa: find("sa"),
        sa_ahead: find("s_acc_block_sa"),
    };
    let mut run = Run {
        env: BTreeMap::from([
            ("K".to_string(), blocks * 128),
            ("KB".to_string(), blocks),
            ("M".to_string(), 1 << 20),
            ("N".to_string(), 1 << 20),
        ]),
        blocks,
        uncommitted: Vec::new(),
        groups: Vec::new(),
        done: [None, None],
        scales: [None, None],
        promoted: Vec::new(),
    };
    // The consumers' k loop and what follows it in the tile loop, up to the epilogue.
    let mut k_loop = None;
    hopfuse::kir::walk(&kernel.body, &mut |s| {
        if let Stmt::Loop(l) = s {
            if l.var == "k_oo" {
                k_loop = Some(s);
                return hopfuse::kir::Flow::Skip;
            }
        }
        hopfuse::kir::Flow::Descend
    });
    exec(
        &mut run,
        std::slice::from_ref(k_loop.expect("the k loop")),
        &bufs,
    );
    assert!(run.groups.is_empty() && run.uncommitted.is_empty());
    run.promoted
}

#[test]
fn the_overlapped_k_loop_promotes_every_block_once_in_order_from_its_own_half() {
    let kernel = compile(&example(OVERLAP)).kernel;
    // Whole iterations of four blocks, partial ones (the ragged bench size's 9) and none.
    for blocks in [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 128] {
        let promoted = run_overlapped_k_loop(&kernel, blocks);
        assert_eq!(promoted, (0..blocks).collect::<Vec<_>>(), "{blocks} blocks");
    }
}

#[test]
fn a_block_accumulator_that_does_not_fit_twice_is_promoted_after_its_group() {
    // Step 18's 64 x 128 per warp group: 3 x 64 registers and the rest exceed the 168 ptxas
    // gives each of the 384 threads, so the promotion waits for its block (wait_group 0).
    let cuda = compile(&example(STEP18)).cuda;
    assert!(cuda.contains("float s_acc_block[64];"), "{cuda}");
    assert!(!cuda.contains("hf_wgmma_wait<1>"), "{cuda}");
    assert!(!cuda.contains("k_oo"), "{cuda}");
}

/// The overlapped step 18 with its output quantized to e4m3 by a per-tensor scale (a scalar
/// input) and stored from the registers (no TMA-stored bf16 cache), plus `extra` fusion lines.
fn quantized_output(extra: &str) -> String {
    let src = edit(
        &edit(
            &example(OVERLAP),
            "  input sb: f32[NB, KB]\n",
            "  input sb: f32[NB, KB]\n  input scale: f32\n",
        ),
        "  c = cast(s, bf16)\n  output c\n",
        &format!("  c = cast(s * scale, f8e4m3)\n  output c\n{extra}"),
    );
    src.lines()
        .filter(|l| !l.trim_start().starts_with("c_s") && !l.trim_start().starts_with("c."))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn a_quantized_output_is_scaled_and_cast_to_e4m3_in_the_epilogue() {
    let src = quantized_output("");
    let cuda = compile(&src).cuda;
    // The promoted f32 sum times the scale, cast to e4m3 in the registers, two adjacent
    // columns stored as one 2-byte vector where both are in bounds.
    assert!(
        cuda.contains("c_mul[0] = s_acc[2 * r4_pair + r4_lane] * scale;"),
        "{cuda}"
    );
    assert!(
        cuda.contains("*reinterpret_cast<hf_vec<__nv_fp8_e4m3, 2>*>(&c["),
        "{cuda}"
    );
    // The reference: the f32 sum times the scale, rounded to e4m3.
    let f = hopfuse::reference_fusion(&src).unwrap();
    let (m, n, k) = (2usize, 3usize, 256usize);
    let a = fp8_values(m * k, 3);
    let b = fp8_values(n * k, 4);
    let inputs = BTreeMap::from([
        ("a".to_string(), a.clone()),
        ("b".to_string(), b.clone()),
        ("sa".to_string(), vec![1.0; m * 2]),
        ("sb".to_string(), vec![1.0; 2]),
        ("scale".to_string(), vec![0.25]),
    ]);
    let at = sizes(&[("M", 2), ("N", 3), ("K", 256), ("KB", 2), ("NB", 1)]);
    let got = hopfuse::backend::reference::evaluate(&f, &at, &inputs).unwrap()["c"].clone();
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|kk| a[i * k + kk] * b[j * k + kk]).sum();
            assert_eq!(
                got[i * n + j],
                DType::F8E4M3.round(dot * 0.25),
                "c[{i}, {j}]"
            );
        }
    }
}

#[test]
fn the_amax_of_a_quantized_product_in_its_kernel_is_refused_at_the_amax() {
    // The amax over all axes is a scalar output, but in the product's kernel its reduction
    // axes are the tile loops the product binds to blocks: `propagate` does not bind a
    // consumer's blocks onto a reduction's axes, so without `amax.parallelize(0, BIDy)` and
    // `amax.parallelize(1, BIDx)` (step 19) it is an error located at the amax.
    let e = error(&quantized_output(
        "  amax = max(abs(s), axis=[0, 1])\n  output amax\n",
    ));
    assert!(
        e.contains("error: `amax` shares loop `m_o` with a tensor that parallelizes it as BIDy"),
        "{e}"
    );
}

const STEP19: &str = "matmul/step19_fp8_out_amax.hf";

#[test]
fn step19_reduces_the_amax_of_the_output_in_the_products_kernel() {
    let c = compile(&example(STEP19));
    let cuda = &c.cuda;
    let consumer = hopfuse_tests::consumer_code(cuda);
    let at = |s: &str| hopfuse_tests::position(consumer, s);
    // Each consumer thread: the max of |y| over its fragment registers of every tile it takes
    // (initialised before the tile loop, updated under the bounds guard, before the saturating
    // cast's clamp is what is stored), then the consumers' reduction and the CTAs' combine
    // after the last tile, with named barriers over the 256 consumer threads only.
    let init = at("amax_acc[0] = __int_as_float(0xff800000);");
    let tile_loop = at("for (index_t tile = 0;");
    let abs = at("amax_abs[0] = fabsf(y[0]);");
    let update = at("amax_acc[0] = hf_maximum(amax_acc[0], amax_abs[0]);");
    let block = at("amax_acc[0] = hf_consumers_reduce<256u>(amax_acc[0], hf_max(), ");
    let grid =
        at("const bool amax_last = hf_grid_reduce_consumers<float, 256u>(amax_acc[0], hf_max(), ");
    let write = at("amax[0] = amax_acc[0];");
    assert!(
        init < tile_loop && tile_loop < abs && abs < update,
        "{consumer}"
    );
    assert!(update < block && block < grid && grid < write, "{consumer}");
    let guard = consumer[..update]
        .rfind("if (")
        .expect("the update's guard");
    assert!(
        consumer[guard..update].contains("< M && ") && consumer[guard..update].contains("< N)"),
        "{consumer}"
    );
    assert!(
        cuda.contains("s_acc[r] = hf_clamp(c_mul[0], -448.0f, 448.0f);"),
        "{cuda}"
    );
    // The e4m3 output is staged in shared memory (128-byte swizzle) and TMA-stored, one box per
    // 128 columns: each thread's two adjacent columns go into the cache as one 2-byte store,
    // unguarded (the TMA store clips the box), after the amax's update.
    assert!(
        consumer.contains("__nv_fp8_e4m3* c_s = reinterpret_cast<__nv_fp8_e4m3*>(hf_smem + "),
        "{consumer}"
    );
    let lane_loop = at("for (index_t r2_lane = 0; r2_lane < 2; ++r2_lane) {");
    let pair_store = at("*reinterpret_cast<hf_vec<__nv_fp8_e4m3, 2>*>(&c_s[");
    let tma_store = at("hf_tma_store_2d(&c_map, (int)(tile_v1 + n_io * 128), (int)(tile_v0), ");
    assert!(update < lane_loop && lane_loop < pair_store, "{consumer}");
    assert!(
        !consumer[lane_loop..pair_store].contains("if ("),
        "the staged pair store is unguarded: {consumer}"
    );
    assert!(
        pair_store < at("hf_fence_proxy_async();") && pair_store < tma_store,
        "{consumer}"
    );
    // One conversion per register into the pair's registers; nothing is stored to `c` but
    // by the TMA store.
    assert!(
        consumer.contains(
            "c_s_pair[r2_lane] = hf_float_to_e4m3(s_acc[n_io * 128 % 256 / 16384 * 128 + n_io * 128 % 256 % 16384 / 8 * 4 + (2 * r2_pair + r2_lane)]);"
        ),
        "{consumer}"
    );
    assert_eq!(
        consumer.matches("hf_float_to_e4m3(").count(),
        1,
        "{consumer}"
    );
    assert!(!consumer.contains("&c["), "{consumer}");
    // The consumers' helpers take no block-wide barrier (the producer warps have left).
    let helpers = &cuda[cuda.find("hf_consumers_reduce(T val").expect("the helper")..];
    let helpers = &helpers[..helpers.find("extern \"C\"").expect("the kernel")];
    assert!(!helpers.contains("__syncthreads"), "{helpers}");
    assert!(!cuda.contains("hf_grid_reduce<"), "{cuda}");
    // The workspace (zeroed once; the last CTA resets its counter) is a parameter.
    assert!(
        c.plan.params.iter().any(|p| matches!(p,
            hopfuse::plan::Param::Tensor { name, role: hopfuse::plan::TensorRole::Workspace, .. }
                if name == "hf_grid_workspace")),
        "{:?}",
        c.plan.params
    );
    // The float64 reference and the twin: amax = max |y| over the whole output, c the
    // clamped cast of y * out_scale.
    let f = hopfuse::reference_fusion(&example(STEP19)).unwrap();
    let (m, n, k) = (3usize, 5usize, 64usize);
    let a = fp8_values(m * k, 1);
    let b = fp8_values(n * k, 2);
    let inputs = BTreeMap::from([
        ("a".to_string(), a.clone()),
        ("b".to_string(), b.clone()),
        ("scale".to_string(), vec![1.5]),
        ("out_scale".to_string(), vec![8.0]),
    ]);
    let out = hopfuse::backend::reference::evaluate(
        &f,
        &sizes(&[("M", m as i64), ("N", n as i64), ("K", k as i64)]),
        &inputs,
    )
    .unwrap();
    let mut amax = 0f64;
    for i in 0..m {
        for j in 0..n {
            let y = 1.5 * (0..k).map(|kk| a[i * k + kk] * b[j * k + kk]).sum::<f64>();
            amax = amax.max(y.abs());
            let want = DType::F8E4M3.round((y * 8.0).clamp(-448.0, 448.0));
            assert_eq!(out["c"][i * n + j], want, "c[{i}, {j}]");
        }
    }
    assert!(
        amax > 448.0 / 8.0,
        "the sizes exercise the saturation: amax {amax}"
    );
    assert_eq!(out["amax"], [amax]);
    let twin = hopfuse::torch_twin(&example(STEP19)).unwrap().source;
    assert!(
        twin.contains("amax = torch.amax(torch.abs(y), dim=(0, 1))"),
        "{twin}"
    );
}

/// Step 19 with its output stored from the registers (no `c_s`).
fn step19_register_stored() -> String {
    example(STEP19)
        .lines()
        .filter(|l| !(l.starts_with("//") || l.starts_with("  c_s") || l.starts_with("  c.")))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn a_register_stored_fp8_output_pairs_its_stores_past_the_amax() {
    // The e4m3 output's two adjacent columns go out as one 2-byte global store (the amax's
    // update, which does not touch `c`, moves before the store so that it can pair), the amax
    // still updated per register under its own guard.
    let src = step19_register_stored();
    assert!(!src.contains("c_s"), "{src}");
    let cuda = compile(&src).cuda;
    let consumer = hopfuse_tests::consumer_code(&cuda);
    let at = |s: &str| hopfuse_tests::position(consumer, s);
    let abs = at("amax_abs[0] = fabsf(y[0]);");
    let update = at("amax_acc[0] = hf_maximum(amax_acc[0], amax_abs[0]);");
    let lane_loop = at("for (index_t r_lane = 0; r_lane < 2; ++r_lane) {");
    let pair_store = at("*reinterpret_cast<hf_vec<__nv_fp8_e4m3, 2>*>(&c[");
    assert!(
        lane_loop < abs && update < at("c_pair[r_lane] = hf_float_to_e4m3(c_clamp[0]);"),
        "{consumer}"
    );
    assert!(update < pair_store, "{consumer}");
    // (No element is converted in the store itself: each goes through the pair's registers.)
    assert_eq!(
        consumer.matches("hf_float_to_e4m3(").count(),
        1,
        "{consumer}"
    );
}

#[test]
fn an_fp8_staged_output_needs_a_box_row_of_the_swizzles_span() {
    // 64 e4m3 columns are a 64-byte row: a 128-byte swizzle needs 128 of them (or swizzle=64).
    let src = example(STEP19).replace("c_s.split(4, 128)", "c_s.split(4, 64)");
    let src = src.replace("  c.split(4, 128)", "  c.split(4, 64)");
    let e = error(&src);
    assert!(
        e.contains("`c` (TMA store from `c_s`): with 128-byte swizzle the inner box row must be exactly 128 bytes, it is 64"),
        "{e}"
    );
    let src = src.replace("store=tma, swizzle=128", "store=tma, swizzle=64");
    let cuda = compile(&src).cuda;
    assert!(
        cuda.contains("*reinterpret_cast<hf_vec<__nv_fp8_e4m3, 2>*>(&c_s["),
        "{cuda}"
    );
}

#[test]
fn a_block_whose_wgmmas_are_not_one_group_keeps_one_half_and_waits() {
    // The K tile's k32 steps in a serial loop: each wgmma is its own group, waited for before
    // the next, so there is no group to keep in flight across the promotion: one half, the
    // promotion after wait_group 0.
    let src = edit(&example(OVERLAP), "  s.parallelize(3, Unroll)\n", "");
    let cuda = compile(&src).cuda;
    assert!(cuda.contains("float s_acc_block[32];"), "{cuda}");
    assert!(cuda.contains("int s_acc_block_started[1];"), "{cuda}");
    assert!(
        cuda.contains("hf_wgmma_m64n64k32_e4m3_e4m3(&s_acc_block[0], "),
        "{cuda}"
    );
    assert!(!cuda.contains("hf_wgmma_wait<1>"), "{cuda}");
    assert!(!cuda.contains("k_oo"), "{cuda}");
}
