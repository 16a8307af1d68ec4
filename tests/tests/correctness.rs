//! Programs that once lowered to a silently wrong kernel or to CUDA that is not CUDA: each is
//! now either indexed right or rejected with a located message that states the rule.

fn compile(src: &str) -> Result<hopfuse::Compilation, String> {
    hopfuse::compile(src, &Default::default()).map_err(|e| e.render(src, "t.hf"))
}

fn err(src: &str) -> String {
    match compile(src) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(e) => e,
    }
}

fn program(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The text of the statement that writes `y` in the emitted CUDA.
fn write_of(cuda: &str, lhs: &str) -> String {
    cuda.lines()
        .find(|l| l.trim_start().starts_with(lhs))
        .unwrap_or_else(|| panic!("no write of {lhs} in\n{cuda}"))
        .trim()
        .to_string()
}

/// `y` reads `t` from its own loops (n_io2, n_ii2), not from the writer's thread index (n_io),
/// and `barrier` orders the write of `t` before the read.
fn assert_read_from_own_loops(program_name: &str, barrier: &str) {
    let c = compile(&program(program_name)).unwrap();
    let read = write_of(&c.cuda, "y[");
    assert!(
        !read.contains("n_io *"),
        "the read uses the writer's thread index: {read}"
    );
    assert!(read.contains("t[(n_io2 * 128 + n_ii2) % 256]"), "{read}");
    let (w, r) = (
        c.cuda.find("t[n_io * 2 + n_ii] =").unwrap(),
        c.cuda.find(&read).unwrap(),
    );
    assert!(c.cuda[w..r].contains(barrier), "{}", &c.cuda[w..r]);
}

#[test]
fn shared_tensor_read_with_another_thread_layout_is_indexed_from_the_reader() {
    // `t` is written by 128 threads x 2 (n_io = threadIdx.x), read by 2 x 128 threads
    // (n_ii2 = threadIdx.x).
    assert_read_from_own_loops("basics/layout_change.hf", "__syncthreads()");
}

#[test]
fn warp_specialized_consumer_reading_with_another_layout() {
    assert_read_from_own_loops("ws/layout_change.hf", "hf_bar_sync<128>()");
}

#[test]
fn registers_read_by_another_thread_are_rejected() {
    let src = program("basics/layout_change.hf").replace("set_memory(shared)", "set_memory(local)");
    let e = err(&src);
    assert!(
        e.contains("`y` reads `t` with another thread layout")
            && e.contains("axis 2 of `t` is bound to TIDx")
            && e.contains("a thread cannot read another thread's registers"),
        "{e}"
    );
    assert!(e.starts_with("t.hf:7:3: error"), "{e}");
}

#[test]
fn global_intermediate_read_with_another_layout_gets_a_barrier() {
    let src =
        program("basics/layout_change.hf").replace("set_memory(shared)", "set_memory(global)");
    let c = compile(&src).unwrap();
    let read = write_of(&c.cuda, "y[");
    assert!(
        read.contains("t[m * N + (n_o * 256 + (n_io2 * 128 + n_ii2))]"),
        "{read}"
    );
    let (w, r) = (
        c.cuda.find("t[m * N + (n_o * 256 + (n_io * 2").unwrap(),
        c.cuda.find(&read).unwrap(),
    );
    assert!(
        c.cuda[w..r].contains("__syncthreads()"),
        "{}",
        &c.cuda[w..r]
    );
}

#[test]
fn blocks_reading_other_blocks_writes_are_rejected() {
    let src = "fusion f {\n  input x: f32[64, 64]\n  t = exp(x)\n  y = t + 1.0\n  output y\n}\nschedule {\n  t.set_memory(global)\n  t.parallelize(0, BIDx)\n  y.parallelize(1, BIDx)\n  t.inline_at(0)\n}\n";
    let e = err(src);
    assert!(
        e.contains("axis 0 of `t` is bound to BIDx")
            && e.contains("blocks cannot read what other blocks write"),
        "{e}"
    );
}

const TMA_EXP: &str = "fusion f {\n  input x: f32[M, N]\n  y = exp(x)\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(1, 256)\n  y.parallelize(0, BIDx)\n  propagate(y)\n";

#[test]
fn compute_at_after_propagate_is_honoured() {
    // Written after `propagate`, compute_at used to be ignored (position 0), and the circular
    // buffer then failed with "no serial loop encloses the load".
    let src = format!("{TMA_EXP}  x_s.parallelize(2, Bulk)\n  x_s.compute_at(y, 2)\n  x_s.circular_buffer(2)\n}}\n");
    let c = compile(&src).unwrap();
    assert!(c.cuda.contains("hf_tma_load_2d"), "{}", c.cuda);
    assert!(c.cuda.contains("hf_mbarrier_wait"), "{}", c.cuda);
}

#[test]
fn compute_at_past_the_shared_loops_says_why() {
    let src = format!("{TMA_EXP}  x_s.split(2, 64)\n  x_s.compute_at(y, 3)\n}}\n");
    let e = err(&src);
    assert!(
        e.contains("`x_s` is already transformed")
            && e.contains("axis 2 of `x_s` is not the same loop as axis 2 of `y`")
            && e.contains("at most 2"),
        "{e}"
    );
}

#[test]
fn out_of_range_literals_are_located_errors() {
    let e = err("fusion f {\n  input a: i32[N]\n  b = a + 3000000000\n  output b\n}\n");
    assert!(
        e.starts_with("t.hf:3:7: error: add: the literal 3000000000 is out of range for i32"),
        "{e}"
    );
    let e = err("fusion f {\n  input a: f32[N]\n  b = a * 1e39\n  output b\n}\n");
    assert!(
        e.contains("the literal 1e39 is out of range for f32"),
        "{e}"
    );
    // in range: the extremes are emitted exactly
    let c =
        compile("fusion f {\n  input a: i32[N]\n  b = a + 2147483647\n  output b\n}\n").unwrap();
    assert!(c.cuda.contains("+ 2147483647"), "{}", c.cuda);
}

#[test]
fn infinities_from_literal_arithmetic_are_valid_cuda() {
    let c = compile("fusion f {\n  input a: f32[N]\n  b = a + 1.0 / 0.0\n  c = b * (0.0 - 1.0 / 0.0)\n  output c\n}\n").unwrap();
    assert!(
        !c.cuda.contains("inff") && !c.cuda.contains("inf)"),
        "{}",
        c.cuda
    );
    assert!(c.cuda.contains("__int_as_float(0x7f800000)"), "{}", c.cuda);
    assert!(c.cuda.contains("__int_as_float(0xff800000)"), "{}", c.cuda);
}

#[test]
fn names_the_cuda_source_cannot_hold_are_rejected() {
    for (name, why) in [
        ("int", "a C++ keyword"),
        ("asm", "a C++ keyword"),
        ("template", "a C++ keyword"),
        (
            "threadIdx",
            "a name CUDA or the generated kernel already uses",
        ),
        (
            "index_t",
            "a name CUDA or the generated kernel already uses",
        ),
        ("__LINE__", "reserved to the C++ implementation"),
        ("hf_smem", "reserved for the generated kernel's helpers"),
    ] {
        // as an input, as a computed tensor, as a size symbol and as a schedule cache
        let input =
            format!("fusion f {{\n  input {name}: f32[N]\n  b = {name} + 1.0\n  output b\n}}\n");
        let e = err(&input);
        assert!(
            e.contains(&format!("`{name}` cannot be used as a name: it is {why}")),
            "{e}"
        );
        assert!(e.starts_with("t.hf:2:3:"), "{e}");
        let computed =
            format!("fusion f {{\n  input a: f32[N]\n  {name} = a + 1.0\n  output {name}\n}}\n");
        assert!(
            err(&computed).contains("cannot be used as a name"),
            "{name}"
        );
        let size = format!("fusion f {{\n  input a: f32[{name}]\n  b = a + 1.0\n  output b\n}}\n");
        assert!(err(&size).contains("cannot be used as a name"), "{name}");
        let cache = format!("fusion f {{\n  input a: f32[N]\n  b = a + 1.0\n  output b\n}}\nschedule {{\n  {name} = cache_after(a)\n}}\n");
        assert!(err(&cache).contains("cannot be used as a name"), "{name}");
    }
}

#[test]
fn derived_names_step_around_user_names() {
    // `s_acc` is a user tensor; the accumulator of `s` must not take its name.
    let c = compile("fusion f {\n  input x: f32[M, N]\n  s = sum(x, axis=1)\n  s_acc = s * 2.0\n  output s_acc\n}\nschedule {\n  s_acc.parallelize(0, BIDx)\n  propagate(s_acc)\n}\n").unwrap();
    assert!(c.cuda.contains("s_acc2"), "{}", c.cuda);
}

const SPLIT_BOX: &str = "fusion f {\n  input x: f32[M, 256]\n  y = exp(x)\n  output y\n}\nschedule {\n  x_s = cache_after(x, memory=shared, load=tma)\n  y.split(0, 8)\n  y.split(2, 64)\n  y.parallelize(0, BIDx)\n";

#[test]
fn box_dimension_from_both_parts_of_a_split() {
    // The outer part (4) and the inner part (64) of a split of the constant 256 together are
    // the whole dimension: one 8 x 256 box. This used to fail with "must follow its dimension
    // order" although the order was right.
    let src = format!("{SPLIT_BOX}  propagate(y)\n  x_s.parallelize(1, Bulk)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  inline_most()\n}}\n");
    let c = compile(&src).unwrap();
    assert_eq!(c.plan.tensor_maps[0].box_dims, vec![256, 8]);
}

#[test]
fn box_pieces_in_the_wrong_order_state_the_rule() {
    let src = format!("{SPLIT_BOX}  y.reorder(0, 1, 3, 2)\n  propagate(y)\n  x_s.parallelize(1, Bulk)\n  x_s.parallelize(2, Bulk)\n  x_s.parallelize(3, Bulk)\n  inline_most()\n}}\n");
    let e = err(&src);
    assert!(
        !e.contains("dimension order") && e.contains("outer pieces first") && e.contains("[2, 3]"),
        "{e}"
    );
}
