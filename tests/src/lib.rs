//! Integration tests live in tests/tests/. This library holds what they share with the fuzz
//! script and the lowering benchmark: the example programs and generators of large and hostile
//! programs.

pub use hopfuse::examples::Example;

/// Every example program of this repository (`examples/<group>/*.hf`, [`hopfuse::examples`]),
/// sorted by group and name.
pub fn examples() -> Vec<Example> {
    hopfuse::examples::list(&hopfuse::examples::repo_root()).expect("examples/")
}

/// The text of example `path` (relative to `examples/`, e.g. `matmul/step9_...hf`).
pub fn example(path: &str) -> String {
    let file = hopfuse::examples::repo_root().join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The compilation of `src`, which must compile (else the rendered errors are the panic).
pub fn compile(src: &str) -> hopfuse::Compilation {
    hopfuse::compile(src, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")))
}

/// The rendered errors of `src`, which must not compile.
pub fn error(src: &str) -> String {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("compiled:\n{src}"),
        Err(e) => e.render(src, "t.hf"),
    }
}

/// The consumer branch of a warp-specialized kernel's CUDA (from `// consumer warps` on).
pub fn consumer_code(cuda: &str) -> &str {
    &cuda[cuda.find("// consumer warps").expect("warp roles")..]
}

/// Where `s` first occurs in `code` (for asserting the order of statements); panics with the
/// code when it does not.
pub fn position(code: &str, s: &str) -> usize {
    code.find(s)
        .unwrap_or_else(|| panic!("`{s}` is not in the code:\n{code}"))
}

/// Output `output` of `src`'s fusion by the float64 reference, at `sizes` on `inputs`.
pub fn reference(
    src: &str,
    sizes: &[(&str, i64)],
    inputs: &[(&str, Vec<f64>)],
    output: &str,
) -> Vec<f64> {
    let program = hopfuse::frontend::parse(src).unwrap();
    let f = hopfuse::fusion::build(&program.fusion).unwrap_or_else(|d| panic!("{}", d.message));
    let sizes = sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let inputs = inputs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let mut out = hopfuse::backend::reference::evaluate(&f, &sizes, &inputs).unwrap();
    out.remove(output)
        .unwrap_or_else(|| panic!("no output `{output}`"))
}

/// `n` deterministic values in [-2, 2), varied by `seed` (an xorshift stream): inputs for the
/// float64 reference on the host.
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        })
        .collect()
}

/// `n` values every 8-bit float holds exactly (multiples of 1/4 in [-2, 2]), varied by `seed`:
/// FP8 inputs whose products and sums the float64 reference computes exactly.
pub fn fp8_values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7 + seed * 13) % 17) as f64 / 4.0 - 2.0)
        .collect()
}

/// Every example as the programs its kernels compile from, `(id, source)`, in the order of
/// [`examples`]: an example that compiles to one kernel is itself (`group/name`); one that no
/// scheduler takes whole is each of its segments' programs ([`hopfuse::segment`]:
/// `group/name#col_norm_s1`, ...), since its own serial default may not lower at all. For the
/// tests that check every kernel (the IR dumps, line maps, plans, the verifier).
pub fn example_programs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in examples() {
        let source = std::fs::read_to_string(&e.path).expect("read");
        match hopfuse::segment::decide(&source, None) {
            Ok(hopfuse::segment::Decision::Split(split)) => {
                for s in split.segments {
                    out.push((format!("{}#{}", e.id(), s.name), s.source));
                }
            }
            _ => out.push((e.id(), source)),
        }
    }
    out
}

/// The text of every example program, in the order of [`examples`].
pub fn example_sources() -> Vec<String> {
    examples()
        .iter()
        .map(|e| std::fs::read_to_string(&e.path).expect("read"))
        .collect()
}

pub mod stress {
    //! Programs of every shape up to the service's 64 KiB program limit: long chains of
    //! statements, one expression at the operation limit, wide fusions, deep and long
    //! schedules, chains of reductions, nesting at the parser's depth limit. Each must lower (or
    //! be rejected with a located error) quickly and without exhausting a 2 MiB thread stack.

    /// The service's program size limit (`hopfuse serve --max-program-bytes`).
    pub const PROGRAM_LIMIT: usize = 64 * 1024;

    fn fits(
        lines: impl Iterator<Item = String>,
        head: &str,
        tail: impl Fn(usize) -> String,
    ) -> String {
        let mut body = String::new();
        let mut n = 0;
        for l in lines {
            if head.len() + body.len() + l.len() + 1 + tail(n + 1).len() > PROGRAM_LIMIT {
                break;
            }
            body.push_str(&l);
            body.push('\n');
            n += 1;
        }
        format!("{head}{body}{}", tail(n))
    }

    /// `t{i} = t{i-1} + x` as many times as fit, scheduled and inlined.
    pub fn statement_chain() -> String {
        fits(
            (0..).map(|i| {
                if i == 0 {
                    "  t0 = x + 1.0".to_string()
                } else {
                    format!("  t{i} = t{} + x", i - 1)
                }
            }),
            "fusion chain {\n  input x: f32[N]\n",
            |n| {
                let y = format!("t{}", n.saturating_sub(1));
                format!("  output {y}\n}}\nschedule {{\n  {y}.split(0, 128)\n  {y}.parallelize(0, BIDx)\n  {y}.parallelize(1, TIDx)\n  propagate({y})\n  inline_most()\n}}\n")
            },
        )
    }

    /// Statements of `x + x + ... + x` at the per-statement operation limit, chained, up to the
    /// fusion's operation limit.
    pub fn long_expressions() -> String {
        let statements =
            hopfuse::fusion::build::MAX_FUSION_OPS / hopfuse::frontend::parser::MAX_EXPR_OPS - 1;
        let all = all_long_expressions();
        let mut lines: Vec<&str> = all.lines().collect();
        // header (2 lines), `statements` statements, then the output and the closing brace
        let output = format!("  output e{}", statements - 1);
        lines.truncate(2 + statements);
        format!("{}\n{output}\n}}\n", lines.join("\n"))
    }

    /// As many such statements as fit in 64 KiB: more operations than one fusion may have
    /// (rejected with a located error).
    pub fn too_many_operations() -> String {
        all_long_expressions()
    }

    fn all_long_expressions() -> String {
        let sum = |prev: &str| {
            let mut e = prev.to_string();
            for _ in 0..hopfuse::frontend::parser::MAX_EXPR_OPS {
                e.push_str("+x");
            }
            e
        };
        fits(
            (0..).map(|i| {
                if i == 0 {
                    format!("  e0 = {}", sum("x"))
                } else {
                    format!("  e{i} = {}", sum(&format!("e{}", i - 1)))
                }
            }),
            "fusion long {\n  input x: f32[N]\n",
            |n| format!("  output e{}\n}}\n", n.saturating_sub(1)),
        )
    }

    /// One more operation than a statement may hold (rejected with a located error).
    pub fn too_long_expression() -> String {
        let mut e = "x".to_string();
        for _ in 0..=hopfuse::frontend::parser::MAX_EXPR_OPS {
            e.push_str(" + x");
        }
        format!("fusion long {{\n  input x: f32[N]\n  y = {e}\n  output y\n}}\n")
    }

    /// Many inputs, added pairwise into a tree of statements.
    pub fn wide_fusion() -> String {
        let n = 1200;
        let mut head = String::from("fusion wide {\n");
        for i in 0..n {
            head.push_str(&format!("  input x{i}: f32[M, N]\n"));
        }
        fits(
            (0..n - 1).map(|i| {
                if i == 0 {
                    "  s0 = x0 + x1".to_string()
                } else {
                    format!("  s{i} = s{} * x{}", i - 1, i + 1)
                }
            }),
            &head,
            |k| {
                format!("  output s{}\n}}\nschedule {{\n  s{0}.parallelize(0, BIDx)\n  s{0}.parallelize(1, TIDx)\n  propagate(s{0})\n  inline_most()\n}}\n", k.saturating_sub(1))
            },
        )
    }

    /// Softmax-like chains: each step reduces the last and broadcasts the result back, so every
    /// tensor is reached along many paths.
    pub fn reduction_chain() -> String {
        fits(
            (0..).map(|i| {
                let prev = if i == 0 {
                    "x".to_string()
                } else {
                    format!("y{}", i - 1)
                };
                format!("  m{i} = max({prev}, axis=1)\n  y{i} = {prev} - broadcast(m{i}, axis=1)")
            }),
            "fusion red {\n  input x: f32[M, 256]\n",
            |n| {
                let y = format!("y{}", n.saturating_sub(1));
                format!("  output {y}\n}}\nschedule {{\n  {y}.parallelize(0, BIDx)\n  {y}.parallelize(1, TIDx)\n  propagate({y})\n  inline_most()\n}}\n")
            },
        )
    }

    /// As many splits of one tensor as the schedule allows, then more (rejected at the limit).
    pub fn deep_schedule() -> String {
        fits(
            (0..).map(|i| format!("  y.split({i}, 1)")),
            "fusion deep {\n  input x: f32[N]\n  y = exp(x)\n  output y\n}\nschedule {\n",
            |_| "}\n".to_string(),
        )
    }

    /// A long schedule over a large fusion: a 1,500-statement chain, then schedule statements
    /// on its tensors in turn as many as fit (each is applied, and undone when it fails, on the
    /// whole fusion).
    pub fn long_schedule() -> String {
        let n = 1500;
        let mut head = String::from("fusion chain {\n  input x: f32[N]\n  t0 = x + 1.0\n");
        for i in 1..n {
            head.push_str(&format!("  t{i} = t{} + x\n", i - 1));
        }
        head.push_str(&format!("  output t{}\n}}\nschedule {{\n", n - 1));
        fits(
            (0..).map(|i| format!("  t{}.set_memory(local)", i % (n - 1))),
            &head,
            |_| "}\n".to_string(),
        )
    }

    /// Merges and splits alternating on one axis, deepening its derivation.
    pub fn deep_derivation() -> String {
        fits(
            (0..).map(|_| "  y.split(0, 2)\n  y.merge(0)".to_string()),
            "fusion deep {\n  input x: f32[N]\n  y = exp(x)\n  output y\n}\nschedule {\n",
            |_| "}\n".to_string(),
        )
    }

    /// A 3,000-statement chain whose output is split to the loop-axis limit (24 axes), then
    /// propagated once and inlined: every tensor gets 24 loops.
    pub fn split_chain() -> String {
        split_chain_then(3000, 23, |y| {
            [format!("  propagate({y})"), "  inline_most()".to_string()].into_iter()
        })
    }

    /// Issue 39's slow shape: [`split_chain`]'s splits, then `propagate(y)` again and again, as
    /// many times as fit (each one replays 23 splits on every tensor of the chain).
    pub fn repeated_propagate() -> String {
        split_chain_then(3000, 23, |y| {
            let y = y.to_string();
            (0..).map(move |_| format!("  propagate({y})"))
        })
    }

    /// A chain of `n` statements whose output `y` is split `splits` times (23: to the loop-axis
    /// limit, `fusion::transform::MAX_LOOP_AXES`), then the schedule statements `then(y)` as
    /// many as fit.
    pub fn split_chain_then<I: Iterator<Item = String>>(
        n: usize,
        splits: usize,
        then: impl FnOnce(&str) -> I,
    ) -> String {
        let mut head = String::from("fusion chain {\n  input x: f32[N]\n  t0 = x + 1.0\n");
        for i in 1..n {
            head.push_str(&format!("  t{i} = t{} + x\n", i - 1));
        }
        let y = format!("t{}", n - 1);
        head.push_str(&format!("  output {y}\n}}\nschedule {{\n"));
        for _ in 0..splits {
            head.push_str(&format!("  {y}.split(0, 2)\n"));
        }
        fits(then(&y), &head, |_| "}\n".to_string())
    }

    /// Parentheses and calls nested to the parser's depth limit, repeated.
    pub fn deep_nesting() -> String {
        let nested = |d: usize| format!("{}x{}", "exp(".repeat(d), ")".repeat(d));
        fits(
            // 130 x 61 operations: within the fusion's operation limit
            (0..130).map(|i| format!("  n{i} = {}", nested(60))),
            "fusion nest {\n  input x: f32[N]\n",
            |n| {
                let y = format!("n{}", n.saturating_sub(1));
                format!("  output {y}\n}}\nschedule {{\n  {y}.split(0, 128)\n  {y}.parallelize(0, BIDx)\n  {y}.parallelize(1, TIDx)\n  propagate({y})\n  inline_most()\n}}\n")
            },
        )
    }

    /// Every generator, by name.
    pub fn all() -> Vec<(&'static str, String)> {
        vec![
            ("statement chain", statement_chain()),
            ("long expressions", long_expressions()),
            ("too long expression", too_long_expression()),
            ("too many operations", too_many_operations()),
            ("wide fusion", wide_fusion()),
            ("reduction chain", reduction_chain()),
            ("deep schedule", deep_schedule()),
            ("long schedule", long_schedule()),
            ("deep derivation", deep_derivation()),
            ("deep nesting", deep_nesting()),
            ("split chain", split_chain()),
            ("repeated propagate", repeated_propagate()),
        ]
    }
}
