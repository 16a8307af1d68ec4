//! `online_logsumexp(lse)`: a log-sum-exp computed in one pass over its operand (a running
//! maximum and a rescaled sum of exponentials per thread, the threads' pairs combined after the
//! loop) as a schedule choice: the cross-entropy example's kernel reads its row once, the same
//! program without the statement keeps its two nests, the reference and the twin are unchanged,
//! and refusals are located and name the tensor as the user wrote it. (The kernel's values
//! against the float64 reference are checked on the GPU: `hopfuse run` at the example's bench
//! and ragged sizes.)

use hopfuse_tests::{compile, error, example};

fn cross_entropy() -> String {
    example("fusions/cross_entropy_labels.hf")
}

/// The statements of the CUDA body (from the kernel's signature on), trimmed.
fn kernel_lines(cuda: &str) -> Vec<&str> {
    let at = cuda.find("__global__").expect("a kernel");
    cuda[at..].lines().map(str::trim).collect()
}

fn position(lines: &[&str], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.starts_with(needle))
        .unwrap_or_else(|| panic!("no line starting `{needle}` in\n{}", lines.join("\n")))
}

#[test]
fn the_cross_entropy_example_reads_its_row_once() {
    let c = compile(&cross_entropy());
    let lines = kernel_lines(&c.cuda);
    let text = lines.join("\n");
    // One loop over the row (the two-pass form had two), and one copy of the row's loads.
    assert_eq!(text.matches("for (index_t v_oo = 0; ").count(), 1, "{text}");
    assert_eq!(
        text.matches("= logits[m * V + ((v_oo * 256 + v_oi) * 8 + v_i)];")
            .count(),
        1,
        "{text}"
    );
    assert!(!text.contains("lse_broadcast"), "{text}");
    // Per vector: the previous maximum, the maximum over the vector, its shift (0 where it is
    // infinite) times -log2(e) once, one rescale of the sum, then the exponentials in base 2,
    // each one FFMA and one exp2.
    let step = [
        "lse_prev[0] = lse_max_acc[0];",
        "lse_max_acc[0] = hf_maximum(lse_max_acc[0], x_r2[v_i]);",
        "lse_neg_log2[0] = (isinf(lse_max_acc[0]) ? 0.0f : lse_max_acc[0]) * -1.442695f;",
        "lse_sum_acc[0] = lse_sum_acc[0] * hf_exp2_ftz(fmaf(lse_prev[0], 1.442695f, lse_neg_log2[0]));",
        "lse_sub[v_i] = fmaf(x_r2[v_i], 1.442695f, lse_neg_log2[0]);",
        "lse_exp[v_i] = hf_exp2_ftz(lse_sub[v_i]);",
        "lse_sum_acc[0] = lse_sum_acc[0] + lse_exp[v_i];",
    ];
    let at: Vec<usize> = step.iter().map(|s| position(&lines, s)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
    // After the loop: the thread's maximum kept, the block's maximum and its shift, the
    // thread's sum rescaled to it, then the block's sum.
    let after = [
        "lse_thread[0] = lse_max_acc[0];",
        "lse_max_acc[0] = hf_block_reduce<true, false, false>(lse_max_acc[0], hf_max(),",
        "lse_where[0] = lse_isinf[0] ? 0.0f : lse_max[0];",
        "lse_sum_acc[0] = lse_sum_acc[0] * expf((lse_thread[0] - lse_where[0]));",
        "lse_sum_acc[0] = hf_block_reduce<true, false, false>(lse_sum_acc[0], hf_sum(),",
    ];
    let loop_end = at[6];
    let at: Vec<usize> = after.iter().map(|s| position(&lines, s)).collect();
    assert!(loop_end < at[0], "{text}");
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
    // The pass is in the dumps.
    assert!(c.passes.iter().any(|p| p.name == "online_logsumexp"));
}

#[test]
fn without_the_statement_the_two_passes_stay_and_the_reference_and_twin_are_the_same() {
    let one = cross_entropy();
    let two = one.replace("  online_logsumexp(lse)\n", "");
    assert_ne!(one, two);
    let c = compile(&two);
    assert_eq!(
        c.cuda.matches("for (index_t v_oo = 0; ").count(),
        2,
        "{}",
        c.cuda
    );
    assert!(c.passes.iter().all(|p| p.name != "online_logsumexp"));
    assert!(!c.cuda.contains("lse_prev"));
    assert_eq!(
        hopfuse::torch_twin(&one).unwrap().source,
        hopfuse::torch_twin(&two).unwrap().source
    );
    let f1 = hopfuse::reference_fusion(&one).unwrap();
    let f2 = hopfuse::reference_fusion(&two).unwrap();
    assert_eq!(f1.tensors.len(), f2.tensors.len());
}

/// A row log-sum-exp of x: f32[M, N] with the example's schedule and `extra` statements
/// after it.
fn row_program(operand: &str, recompute: bool, extra: &str) -> String {
    format!(
        "fusion f {{\n  input x: {operand}[M, N]\n  xf = cast(x, f32)\n  lse = logsumexp(xf, axis=1)\n  y = lse * 2.0\n  output y\n}}\nschedule {{\n{}  lse_sum.split(1, 4)\n  lse_sum.split(1, 128)\n  lse_sum.parallelize(0, BIDx)\n  lse_sum.parallelize(2, TIDx)\n  lse_sum.parallelize(3, Vectorize)\n  propagate(lse_sum)\n  inline_most()\n{extra}}}\n",
        if recompute { "  xf.recompute()\n" } else { "" }
    )
}

#[test]
fn a_plain_row_logsumexp_takes_the_one_pass() {
    let c = compile(&row_program("bf16", true, "  online_logsumexp(lse)\n"));
    assert_eq!(
        c.cuda.matches("for (index_t n_oo = 0; ").count(),
        1,
        "{}",
        c.cuda
    );
    assert!(
        c.cuda.contains("lse_thread[0] = lse_max_acc[0];"),
        "{}",
        c.cuda
    );
    // Without a copy of the operand for the sum, a row of constant width stays in registers
    // (computed in a nest of its own): the one pass walks the registers once, not twice.
    let kept =
        row_program("f32", false, "  online_logsumexp(lse)\n").replace("[M, N]", "[M, 1024]");
    let c = compile(&kept);
    assert_eq!(
        c.cuda.matches("for (index_t d_oo = 0; ").count(),
        2,
        "the row's nest and the one pass: {}",
        c.cuda
    );
    assert!(
        c.cuda
            .contains("lse_max_acc[0] = hf_maximum(lse_max_acc[0], xf[d_oo * 4 + d_i]);"),
        "{}",
        c.cuda
    );
}

#[test]
fn refusals_name_the_tensor_and_the_statement() {
    // Not a log-sum-exp.
    let e = error(&row_program("f32", true, "  online_logsumexp(y)\n"));
    assert!(
        e.starts_with("t.hf:17:20: error: online_logsumexp(...): `y` is not a log-sum-exp: name the tensor a `logsumexp(...)` gives"),
        "{e}"
    );
    // Twice.
    let e = error(&row_program(
        "f32",
        true,
        "  online_logsumexp(lse)\n  online_logsumexp(lse)\n",
    ));
    assert!(
        e.starts_with(
            "t.hf:18:20: error: online_logsumexp(...): `lse` is already computed in one pass"
        ),
        "{e}"
    );
    // In f64.
    let e = error(
        &row_program("f32", true, "  online_logsumexp(lse)\n")
            .replace("cast(x, f32)", "cast(x, f64)"),
    );
    assert!(
        e.contains("`lse` reduces in f64: the running statistics are f32"),
        "{e}"
    );
    // A name that is no tensor.
    let e = error(&row_program("f32", true, "  online_logsumexp(q)\n"));
    assert!(e.contains("unknown tensor `q`"), "{e}");
}
