//! Schedule features that the examples do not all use: each compiles, and the CUDA shows the
//! structure the schedule asked for.

fn compile(src: &str) -> hopfuse::Compilation {
    hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
}

#[test]
fn reorder_swaps_loops() {
    let c = compile(
        "fusion t {\n  input x: f32[M, N]\n  y = x * 2.0\n  output y\n}\nschedule {\n  y.reorder(1, 0)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDx)\n}\n",
    );
    // N is the block index now, M the thread index.
    assert!(
        c.cuda.contains("const index_t n = blockIdx.x;")
            && c.cuda.contains("const index_t m = threadIdx.x;"),
        "{}",
        c.cuda
    );
    assert!(
        c.cuda.contains("y[m * N + n] = x[m * N + n] * 2.0f;"),
        "{}",
        c.cuda
    );
}

#[test]
fn compute_at_replays_the_consumer_and_inlines() {
    let c = compile(
        "fusion t {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\nschedule {\n  x_c = cache_after(x)\n  y.split(1, 128)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  x_c.compute_at(y, 2)\n}\n",
    );
    // x_c was split like y and shares the block and serial loops; it holds one thread's slice.
    assert!(c.cuda.contains("float x_c[1];"), "{}", c.cuda);
    assert_eq!(c.cuda.matches("for (index_t n_o").count(), 1, "{}", c.cuda);
}

#[test]
fn reduction_over_two_axes_with_a_2d_block() {
    let src = "fusion t {\n  input x: f32[B, M, N]\n  s = sum(x, axis=[1, 2])\n  output s\n}\nschedule {\n  s.merge(1)\n  s.split(1, 256)\n  s.parallelize(0, BIDx)\n  s.parallelize(2, TIDx)\n}\n";
    let c = compile(src);
    assert!(
        c.cuda.contains("hf_block_reduce<true, false, false>"),
        "{}",
        c.cuda
    );
    // The reference agrees with a direct sum.
    let sizes = [
        ("B".to_string(), 2),
        ("M".to_string(), 3),
        ("N".to_string(), 4),
    ]
    .into_iter()
    .collect();
    let x: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let inputs = [("x".to_string(), x)].into_iter().collect();
    let out = hopfuse::backend::reference::evaluate(&c.fusion, &sizes, &inputs).unwrap();
    assert_eq!(
        out["s"],
        vec![(0..12).sum::<i32>() as f64, (12..24).sum::<i32>() as f64]
    );
}

#[test]
fn rows_reduced_by_tidx_with_several_rows_per_block_on_tidy() {
    let c = compile(
        "fusion t {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  output s\n}\nschedule {\n  s.split(0, 4)\n  s.split(2, 32)\n  s.parallelize(0, BIDx)\n  s.parallelize(1, TIDy)\n  s.parallelize(3, TIDx)\n  propagate(s)\n}\n",
    );
    assert!(c.cuda.contains("__launch_bounds__(128)"), "{}", c.cuda);
    assert!(
        c.cuda.contains("hf_block_reduce<true, false, false>"),
        "{}",
        c.cuda
    );
    // Only lane x = 0 of each row writes.
    assert!(c.cuda.contains("((index_t)threadIdx.x) == 0"), "{}", c.cuda);
}

#[test]
fn global_intermediate_gets_a_scratch_parameter_and_barriers() {
    let c = compile(
        "fusion t {\n  input x: f32[M, N]\n  t1 = x * 2.0\n  y = t1 + 1.0\n  output y\n}\nschedule {\n  t1.set_memory(global)\n  y.parallelize(0, BIDx)\n  y.parallelize(1, TIDx)\n  propagate(y)\n  t1.inline_at(1)\n}\n",
    );
    // Written, then read back by other threads: not `__restrict__` (nvcc may otherwise hoist
    // the read above the barrier).
    assert!(c.cuda.contains("    float* t1,"), "{}", c.cuda);
    assert!(c.cuda.contains("__syncthreads();"), "{}", c.cuda);
    assert!(c.plan.params.iter().any(|p| matches!(p, hopfuse::plan::Param::Tensor { name, role: hopfuse::plan::TensorRole::Scratch, .. } if name == "t1")));
}

#[test]
fn an_op_before_a_broadcast_runs_in_the_consumers_block_loop() {
    // exp(b) has no M axis; inlined into y it runs inside y's loops, including the M loop bound
    // to blockIdx.x, which it opens first (it comes first in the program).
    let c = compile(
        "fusion t {\n  input x: f32[M, N]\n  input b: f32[N]\n  y = x + broadcast(exp(b), axis=0)\n  output y\n}\nschedule {\n  y.split(1, 128)\n  y.parallelize(0, BIDx)\n  y.parallelize(2, TIDx)\n  propagate(y)\n  inline_most()\n}\n",
    );
    assert!(
        c.cuda.contains("const index_t m = blockIdx.x;"),
        "{}",
        c.cuda
    );
    assert!(!c.cuda.contains("for (index_t m "), "{}", c.cuda);
    assert!(
        c.cuda.contains("y_exp[0] = expf(b[n_o * 128 + n_i]);"),
        "{}",
        c.cuda
    );
    assert!(
        c.cuda.contains(
            "y[m * N + (n_o * 128 + n_i)] = x[m * N + (n_o * 128 + n_i)] + y_broadcast[0];"
        ),
        "{}",
        c.cuda
    );
    // Casts before the broadcasts of matrix-product operands (this failed the same way).
    let mm = compile(
        "fusion t {\n  input a: bf16[M, K]\n  input b: bf16[N, K]\n  s = sum(broadcast(cast(a, f32), axis=1) * broadcast(cast(b, f32), axis=0), axis=2)\n  output s\n}\nschedule {\n  s.split(0, 8)\n  s.split(2, 32)\n  s.reorder(0, 2, 1, 3, 4)\n  s.parallelize(0, BIDy)\n  s.parallelize(1, BIDx)\n  s.parallelize(2, TIDy)\n  s.parallelize(3, TIDx)\n  propagate(s)\n  inline_most()\n}\n",
    );
    assert!(mm.plan.matmul.is_some());
}

const SOFTMAX_F32: &str = "fusion sm {
  input x: f32[M, N]
  m = max(x, axis=1)
  e = exp(x - broadcast(m, axis=1))
  s = sum(e, axis=1)
  y = e / broadcast(s, axis=1)
  output y
}
";

/// `recompute` gives the second reader of a row its own copy, so a streamed softmax keeps no
/// register array sized by the row: three loops over it, the copy's chain inside the last.
#[test]
fn recompute_streams_a_row_through_each_loop() {
    let c = compile(&format!(
        "{SOFTMAX_F32}schedule {{
  x_c = cache_after(x)
  x_c.recompute()
  e.recompute()
  y.split(1, 4)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  y.parallelize(3, Vectorize)
  propagate(y)
  inline_most()
}}"
    ));
    assert_eq!(
        c.cuda.matches("for (index_t n_oo = 0;").count(),
        3,
        "{}",
        c.cuda
    );
    for copy in ["x_c_r2", "e_r2", "e_sub_r2", "x_c_r2_r2"] {
        assert!(
            c.cuda.contains(&format!("float {copy}[4]")),
            "{copy}: {}",
            c.cuda
        );
    }
    // The copies are computed in the output's loop, after the sum is complete.
    let sum_done = c.cuda.find("s[0] = s_acc[0];").unwrap();
    assert!(c.cuda.find("e_r2[n_i] = exp2f").unwrap() > sum_done);
}

#[test]
fn recompute_states_what_it_cannot_copy() {
    let with =
        |schedule: &str| hopfuse_tests::error(&format!("{SOFTMAX_F32}schedule {{\n{schedule}\n}}"));
    let one = with("y.recompute()");
    assert!(one.contains("`y` has one consumer"), "{one}");
    let late = with("x_c = cache_after(x)\nx_c.split(1, 4)\ne.recompute()");
    assert!(
        late.contains(
            "`x_c`, which `e` is computed from, is already scheduled: recompute `e` before"
        ),
        "{late}"
    );
    let shared = with("x_c = cache_after(x)\nx_c.set_memory(shared)\ne.recompute()");
    assert!(shared.contains("placed in shared memory"), "{shared}");
}

#[test]
fn a_padded_shared_cache_spaces_its_rows() {
    let src = hopfuse_tests::example("ops/transpose.hf");
    let c = compile(&src);
    // The tile's rows 33 elements apart where it is written and where it is read, and its
    // size counts the padding (32 x 33 floats).
    assert!(
        c.cuda.contains("x_s[(m_io * 8 + m_ii) * 33 + n_i] = x["),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("= x_s[m_i * 33 + "), "{}", c.cuda);
    assert!(c.cuda.contains("// 1056 elements"), "{}", c.cuda);
    let unpadded = compile(&src.replace(", row_pad=1)", ")"));
    assert!(
        unpadded.cuda.contains("= x_s[m_i * 32 + "),
        "{}",
        unpadded.cuda
    );
}

#[test]
fn padding_is_for_plain_shared_caches() {
    let src = hopfuse_tests::example("ops/transpose.hf");
    let e = hopfuse_tests::error(&src.replace("memory=shared, row_pad=1", "row_pad=1"));
    assert!(
        e.contains("row_pad= spaces the rows of a shared-memory cache that threads fill and read: use it with memory=shared"),
        "{e}"
    );
    assert!(e.contains("t.hf:13:24:"), "{e}");
    let e = hopfuse_tests::error(&src.replace("row_pad=1", "row_pad=-2"));
    assert!(
        e.contains("row_pad= is a number of elements from 0 to 128, not -2"),
        "{e}"
    );
    let e =
        hopfuse_tests::error(&src.replace("row_pad=1)\n", "row_pad=1)\n  x_s.set_memory(local)\n"));
    assert!(
        e.contains("`x_s` has row_pad=1 (the row spacing of a shared-memory cache); it stays in shared memory"),
        "{e}"
    );
}

#[test]
fn a_copy_into_a_padded_shared_tile_is_vectorized_when_its_rows_keep_the_vectors_aligned() {
    let src = hopfuse_tests::example("fusions/transpose_bf16.hf");
    let c = compile(&src);
    // The fill of x's tile: one 8-byte vector from x into the tile, rows 68 elements apart.
    assert!(
        c.cuda.contains(
            "*reinterpret_cast<hf_vec<hf_bf16, 4>*>(&x_s[(m_io * 16 + m_ii) * 68 + n_io * 4]) = *reinterpret_cast<const hf_vec<hf_bf16, 4>*>(&x["
        ),
        "{}",
        c.cuda
    );
    // 64 rows of 64 + 4 elements.
    assert!(c.cuda.contains("// 4352 elements"), "{}", c.cuda);
    // A pad of two elements leaves every other row's vectors misaligned.
    let e = hopfuse_tests::error(&src.replace("row_pad=4", "row_pad=2"));
    assert!(
        e.contains("cannot vectorize the access to `x_s`: its vectors in shared memory are not aligned to 8 bytes"),
        "{e}"
    );
}

/// `recompute(from=x_c)` stops the copies at the cache: the row is read from memory once into
/// `x_c` (here in shared memory) and each loop converts it again, with no row of f32 values
/// kept between the loops.
#[test]
fn recompute_from_a_cache_keeps_the_cache_and_copies_the_rest() {
    let c = compile(
        "fusion sm {
  input x: bf16[M, N]
  xs = cast(x, f32)
  m = max(xs, axis=1)
  e = exp(xs - broadcast(m, axis=1))
  s = sum(e, axis=1)
  y = cast(e / broadcast(s, axis=1), bf16)
  output y
}
schedule {
  x_c = cache_after(x)
  y_c = cache_before(y)
  xs.recompute(from=x_c)
  e.recompute(from=x_c)
  x_c.set_memory(shared)
  y.split(1, 8)
  y.split(1, 4, outer)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  y.parallelize(3, Vectorize)
  propagate(y)
  inline_most()
}",
    );
    // One load of the row (into shared memory), read by the three loops over it.
    assert_eq!(
        c.cuda
            .matches("= *reinterpret_cast<const hf_vec<hf_bf16, 8>*>(&x[")
            .count(),
        1,
        "{}",
        c.cuda
    );
    assert!(
        c.cuda
            .contains("hf_bf16* x_c = reinterpret_cast<hf_bf16*>(hf_smem"),
        "{}",
        c.cuda
    );
    assert!(!c.cuda.contains("x_c_r2"), "{}", c.cuda);
    for copy in ["xs_r2", "e_r2", "xs_r2_r2"] {
        assert!(
            c.cuda.contains(&format!("float {copy}[8]")),
            "{copy}: {}",
            c.cuda
        );
    }
    assert!(
        !c.cuda.contains("float e[32]") && !c.cuda.contains("float xs[32]"),
        "{}",
        c.cuda
    );
}

#[test]
fn recompute_from_names_a_tensor_of_the_chain() {
    let e = hopfuse_tests::error(&format!(
        "{SOFTMAX_F32}schedule {{\n  x_c = cache_after(x)\n  e.recompute(from=y)\n}}"
    ));
    assert!(
        e.contains("`y` is not a tensor that `e` is computed from"),
        "{e}"
    );
}

/// `cache_after(x, l2=evict_last)`: the input's loads carry the L2 policy (the kernel IR's
/// parameter says so).
#[test]
fn an_l2_policy_marks_the_inputs_loads() {
    let src = "fusion t {
  input x: bf16[M, N]
  input b: bf16[N]
  y = cast(cast(x, f32) + cast(broadcast(b, axis=0), f32), bf16)
  output y
}
schedule {
  x_c = cache_after(x, l2=evict_last)
  b_c = cache_after(b, l2=evict_first)
  y.split(1, 8)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  y.parallelize(3, Vectorize)
  propagate(y)
  inline_most()
}";
    let c = compile(src);
    assert!(
        c.cuda
            .contains("= hf_ld_l2<true>(reinterpret_cast<const hf_vec<hf_bf16, 8>*>(&x["),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("hf_ld_l2<false>("), "{}", c.cuda);
    assert!(c
        .cuda
        .contains("createpolicy.fractional.L2::evict_last.b64"));
    let kir = c.kernel.print();
    assert!(kir.contains("global in l2=evict_last"), "{kir}");
    assert!(kir.contains("global in l2=evict_first"), "{kir}");
    // An element load (no vectors) carries it too.
    let elements = compile(&src.replace("  y.split(1, 8)\n", "").replace(
        "  y.parallelize(2, TIDx)\n  y.parallelize(3, Vectorize)",
        "  y.parallelize(2, TIDx)",
    ));
    assert!(
        elements.cuda.contains("hf_ld_l2<true>(&x["),
        "{}",
        elements.cuda
    );
    // Plain loads elsewhere.
    let plain = compile(
        &src.replace(", l2=evict_last", "")
            .replace(", l2=evict_first", ""),
    );
    assert!(!plain.cuda.contains("hf_ld_l2"), "{}", plain.cuda);
}

#[test]
fn an_l2_policy_is_for_the_plain_loads_of_an_input() {
    let with =
        |schedule: &str| hopfuse_tests::error(&format!("{SOFTMAX_F32}schedule {{\n{schedule}\n}}"));
    let before = with("y_c = cache_before(y, l2=evict_last)");
    assert!(before.contains("use it with cache_after"), "{before}");
    let tma = with("x_s = cache_after(x, memory=shared, load=tma, l2=evict_last)");
    assert!(tma.contains("plain loads of a fusion input"), "{tma}");
    let twice = with("x_c = cache_after(x, l2=evict_last)\nx_d = cache_after(x, l2=evict_first)");
    assert!(twice.contains("already have l2=evict_last"), "{twice}");
    let unknown = with("x_c = cache_after(x, l2=keep)");
    assert!(unknown.contains("evict_last"), "{unknown}");
}
