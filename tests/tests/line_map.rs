//! The CUDA line map (`Compilation::lines`) over every example: one entry per CUDA line, every
//! line of the kernel body tied to a kernel-IR statement whose dump line is the same kind of
//! statement, and every IR line blamed on a pass that ran.

use hopfuse::backend::codegen::lines::CudaLine;
use hopfuse::{CompileOptions, IndexType};
use std::path::Path;
/// `(group/name.hf, source)` of every example.
fn examples() -> Vec<(String, String)> {
    // A split example's kernels are its segments' programs.
    hopfuse_tests::example_programs()
        .into_iter()
        .map(|(id, source)| (format!("{id}.hf"), source))
        .collect()
}

/// What kind of IR line a CUDA line of a statement must stand for, from the CUDA text.
fn expected_ir(cuda: &str) -> Option<&'static [&'static str]> {
    let t = cuda.trim_start();
    Some(
        // `{  // i = threadIdx.x`: a loop bound to threadIdx/blockIdx.
        if t.starts_with("for (index_t")
            || t.starts_with("#pragma unroll")
            || t.starts_with("{  //")
        {
            &["for "]
        } else if t.starts_with("if (++") {
            // A flat loop's carry (the step of its digits) belongs to the loop.
            &["for "]
        } else if t.starts_with("if (") {
            &["if ", "producer warps"]
        } else if t.starts_with("} else {  // consumer") {
            &["producer warps"]
        } else if t.starts_with("hf_bar_sync_group") {
            &["group_barrier(", "turn_wait("]
        } else if t.starts_with("hf_bar_arrive_group") {
            &["turn_pass("]
        } else if t.starts_with("__syncthreads()") || t.starts_with("hf_bar_sync") {
            &["__syncthreads()"]
        } else if t.starts_with("hf_tma_load") || t.starts_with("hf_bulk_load") {
            &["<- tma_load", "<- bulk_load"]
        } else if t.starts_with("hf_mbarrier_wait") {
            &["mbarrier_wait"]
        } else if t.starts_with("const index_t") {
            &["let "]
        } else if t.contains("hf_block_reduce") {
            &["block_"]
        } else {
            return None;
        },
    )
}

#[test]
fn every_line_of_every_example_is_mapped_to_what_wrote_it() {
    let files = examples();
    assert!(files.len() >= 20, "{} examples", files.len());
    let mut stmt_lines = 0;
    for (name, src) in &files {
        // And once with the clock probe (`hopfuse run --clock`): its lines are set-up.
        for (index_type, clock_probe) in [
            (IndexType::I32, false),
            (IndexType::I64, false),
            (IndexType::I64, true),
        ] {
            let options = CompileOptions {
                index_type,
                assume_aligned_vectors: false,
                aligned_for: None,
                specialize: false,
                clock_probe,
            };
            let c = hopfuse::compile(src, &options).unwrap_or_else(|d| panic!("{name}: {d}"));
            let cuda: Vec<&str> = c.cuda.lines().collect();
            assert_eq!(
                c.lines.lines.len(),
                cuda.len(),
                "{name}: one entry per line"
            );
            let ir: Vec<&str> = c.passes.last().unwrap().ir.lines().collect();
            let ran: Vec<&str> = c.passes[1..].iter().map(|p| p.name).collect();
            let kernel = cuda
                .iter()
                .position(|l| l.starts_with("extern \"C\" __global__"))
                .unwrap();
            for (i, (line, text)) in c.lines.lines.iter().zip(&cuda).enumerate() {
                let at = format!("{name}:{}: `{text}` ({line:?})", i + 1);
                if i < kernel {
                    assert_eq!(*line, CudaLine::Prelude, "{at}");
                    continue;
                }
                if i + 1 == cuda.len() {
                    assert_eq!(*line, CudaLine::Signature, "{at}: the closing brace");
                    continue;
                }
                match line {
                    CudaLine::Prelude => panic!("{at}: prelude inside the kernel"),
                    CudaLine::Signature | CudaLine::Setup => {}
                    CudaLine::Binding { ir_line, .. } => {
                        let ir_text = ir[ir_line - 1].trim();
                        let var = text.split_whitespace().nth(2).unwrap();
                        assert!(ir_text.starts_with(&format!("{var} = ")), "{at}: {ir_text}");
                    }
                    CudaLine::Stmt { ir_line, pass, .. } => {
                        stmt_lines += 1;
                        let ir_text = ir[ir_line - 1].trim();
                        if let Some(kinds) = expected_ir(text) {
                            assert!(
                                kinds.iter().any(|k| ir_text.contains(k)),
                                "{at}: IR line {ir_line} is `{ir_text}`, expected one of {kinds:?}"
                            );
                        }
                        let pass = pass.as_deref().expect("every dump here is small enough");
                        assert!(ran.contains(&pass), "{at}: pass {pass} did not run");
                    }
                }
            }
            // The body (everything after the set-up) is statements only, but for the list of
            // visited key tiles, made after the mbarriers' init guard (set-up lines).
            let first_stmt = c
                .lines
                .lines
                .iter()
                .position(|l| matches!(l, CudaLine::Stmt { .. }))
                .unwrap_or_else(|| panic!("{name}: no statement lines"));
            // The probe's end is the last line, set-up, unless the kernel ends in its warp
            // roles: then it ends the consumers' branch (thread 0's), as a line of that statement.
            let tail_probe = clock_probe
                && cuda[cuda.len() - 2].trim() == "hf_clock_record(hf_clock_t0, hf_clock_c0);";
            let body_end = cuda.len() - 1 - usize::from(tail_probe);
            for (i, l) in c
                .lines
                .lines
                .iter()
                .enumerate()
                .take(body_end)
                .skip(first_stmt)
            {
                let visited = *l == CudaLine::Setup
                    && (cuda[i].contains("hf_visited") || cuda[i].contains("hf_visit_"));
                assert!(
                    matches!(l, CudaLine::Stmt { .. }) || visited,
                    "{name}: line {} `{}` is {l:?} inside the body",
                    i + 1,
                    cuda[i]
                );
            }
            if clock_probe {
                let records = cuda
                    .iter()
                    .filter(|l| l.trim() == "hf_clock_record(hf_clock_t0, hf_clock_c0);")
                    .count();
                if tail_probe {
                    assert_eq!(records, 1, "{name}");
                    assert_eq!(c.lines.lines[body_end], CudaLine::Setup, "{name}");
                } else {
                    assert_eq!(records, 1, "{name}: in the consumers' branch");
                    // The last line of the consumers' branch of the top-level roles.
                    assert!(
                        c.cuda
                            .contains("    hf_clock_record(hf_clock_t0, hf_clock_c0);\n  }\n"),
                        "{name}"
                    );
                }
                assert!(
                    c.cuda.contains(
                        "__device__ unsigned long long hf_clock_probe[HF_CLOCK_CTAS][2];"
                    ),
                    "{name}"
                );
            } else {
                assert!(!c.cuda.contains("hf_clock"), "{name}");
            }
        }
    }
    assert!(stmt_lines > 500, "{stmt_lines} statement lines in all");
}

#[test]
fn ir_lines_are_blamed_on_the_pass_that_wrote_them() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tma/exp_2d.hf"),
    )
    .unwrap();
    let c = hopfuse::compile(&src, &CompileOptions::default()).unwrap();
    let pass_of = |needle: &str| {
        let i = c
            .cuda
            .lines()
            .position(|l| l.trim_start().starts_with(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in\n{}", c.cuda));
        c.lines.lines[i].pass().map(str::to_string)
    };
    // Bindings and thread loops come from loop_nest, bounds guards from predicate, the
    // barrier in the main loop from sync; circular_buffer rewrote the copies (moved to their
    // slot and iteration) and wrote the barrier set-up and waits.
    assert_eq!(
        pass_of("const index_t m_o = blockIdx.x").as_deref(),
        Some("loop_nest")
    );
    assert_eq!(
        pass_of("{  // m_i = threadIdx.y").as_deref(),
        Some("loop_nest")
    );
    assert_eq!(
        pass_of("if (m_o * 8 + m_i < M").as_deref(),
        Some("predicate")
    );
    assert_eq!(
        pass_of("__syncthreads();").as_deref(),
        Some("circular_buffer")
    );
    assert_eq!(
        pass_of("hf_tma_load_2d").as_deref(),
        Some("circular_buffer")
    );
    assert_eq!(
        pass_of("hf_mbarrier_wait").as_deref(),
        Some("circular_buffer")
    );
    let main_loop_barrier = c
        .cuda
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == "__syncthreads();")
        .map(|(i, _)| c.lines.lines[i].pass())
        .collect::<Vec<_>>();
    assert_eq!(
        main_loop_barrier,
        [
            Some("circular_buffer"),
            Some("sync"),
            Some("circular_buffer")
        ],
        "after the barrier init, in the main loop (the slot is reused), before the inval"
    );
}
