//! The kernel IR's text reads back ([`hopfuse::kir::parse`]): for every example after every
//! pass, `parse(print(k)) == k`; garbage gives an error with its line and column, never a panic.

use hopfuse::kir::{parse, Kernel};
use hopfuse::passes::PIPELINE;
use proptest::prelude::*;

/// The first line where two `{:#?}` renderings differ, with a little context.
fn first_difference(a: &Kernel, b: &Kernel) -> String {
    let (a, b) = (format!("{a:#?}"), format!("{b:#?}"));
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let at = (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .unwrap_or(0);
    let from = at.saturating_sub(6);
    format!(
        "printed:\n{}\nread back:\n{}",
        a[from.min(a.len())..(at + 3).min(a.len())].join("\n"),
        b[from.min(b.len())..(at + 3).min(b.len())].join("\n")
    )
}

/// Every example and every variant of `docs/variants/` (stream-K, ping-pong, clusters), as
/// (name, source).
fn programs() -> Vec<(String, String)> {
    // A split example's kernels are its segments' programs.
    let mut out: Vec<(String, String)> = hopfuse_tests::example_programs();
    let variants = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/variants");
    let mut files: Vec<_> = std::fs::read_dir(&variants)
        .expect("docs/variants/")
        .map(|f| f.expect("an entry").path())
        .filter(|f| f.extension().is_some_and(|e| e == "hf"))
        .collect();
    files.sort();
    for f in files {
        let source = std::fs::read_to_string(&f).expect("a variant");
        out.push((f.display().to_string(), source));
    }
    out
}

/// The dump after every pass of every program.
fn dumps() -> Vec<String> {
    let mut out = Vec::new();
    for (name, source) in programs() {
        let (_, scheduled) =
            hopfuse::schedule(&source).unwrap_or_else(|e| panic!("{}", e.render(&source, &name)));
        let mut lowering = hopfuse::Lowering::new(&scheduled, &Default::default());
        for pass in PIPELINE {
            if lowering.run(pass).expect("the program compiles").is_some() {
                out.push(lowering.kernel.print());
            }
        }
    }
    out
}

/// `index@value[...]` (pass `index_float`, which no generic example's kernel takes: it needs
/// the sizes) reads back: a column minus a row converted to f32 in an unrolled loop,
/// specialised.
#[test]
fn a_combination_of_indices_reads_back() {
    let source = "fusion f {
  input x: f32[M, N]
  d = cast(iota(x, axis=1) - iota(x, axis=0), f32)
  y = x + d
  output y
}
schedule {
  y.split(1, 8)
  y.parallelize(0, BIDx)
  y.parallelize(1, TIDx)
  y.parallelize(2, Unroll)
  propagate(y)
  inline_most()
}";
    let (_, scheduled) = hopfuse::schedule(source).expect("schedules");
    let options = hopfuse::CompileOptions {
        aligned_for: Some([("M".to_string(), 64), ("N".to_string(), 256)].into()),
        specialize: true,
        ..Default::default()
    };
    let mut lowering = hopfuse::Lowering::new(&scheduled, &options);
    for pass in PIPELINE {
        lowering.run(pass).expect("compiles");
    }
    let text = lowering.kernel.print();
    assert!(
        text.contains("d_base[0] = cast<f32>(index@value[8 * n_o - m])"),
        "{text}"
    );
    assert!(
        text.contains("d[0] = add(d_base[0], cast<f32>(index@value[n_i]))"),
        "{text}"
    );
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(
        back == lowering.kernel,
        "{}",
        first_difference(&lowering.kernel, &back)
    );
}

#[test]
fn every_example_after_every_pass_reads_back_as_the_same_kernel() {
    let mut checked = 0;
    let mut stream_k = 0;
    for (name, source) in programs() {
        let (_, scheduled) =
            hopfuse::schedule(&source).unwrap_or_else(|e| panic!("{}", e.render(&source, &name)));
        let mut lowering = hopfuse::Lowering::new(&scheduled, &Default::default());
        for pass in PIPELINE {
            if lowering.run(pass).expect("the example compiles").is_none() {
                continue;
            }
            let text = lowering.kernel.print();
            let back = parse(&text)
                .unwrap_or_else(|e| panic!("{name} after `{}`: {e}\n{text}", pass.name));
            assert!(
                back == lowering.kernel,
                "{name} after `{}`: {}",
                pass.name,
                first_difference(&lowering.kernel, &back)
            );
            checked += 1;
            stream_k += usize::from(hopfuse::kir::stream_k(&back).is_some());
        }
    }
    // 47 examples and 8 variants: 554 kernels when this was written.
    assert!(checked > 500, "{checked} dumps");
    assert!(stream_k > 0, "no stream-K kernel among the programs");
}

/// A text's errors: `Err` with a line and column inside the text, never a panic.
fn check_rejects_cleanly(text: &str) {
    if let Err(e) = parse(text) {
        let lines = text.lines().count().max(1);
        assert!(e.line >= 1 && e.line <= lines, "{e} in {lines} lines");
        assert!(e.column >= 1, "{e}");
    }
}

#[test]
fn errors_name_the_line_and_column() {
    let head = "kernel k  grid(1, 1, 1)  block(32, 1, 1)\n  param x: f32[N] global in (t0)\n";
    let cases = [
        ("  y[0] = 1.0  // e0\n", "3:3: no buffer `y` is declared"),
        (
            "  for i in N @Serial key 0:\n    x[i] = exp(1.0  // e0\n",
            "4:19: expected `)`, found `  // e0`",
        ),
        (
            "  for i in N @Sideways key 0:\n",
            "3:15: `Sideways` is not a parallel type",
        ),
        (
            "  if 0 < N:\n      x[0] = 1.0  // e0\n",
            "4:7: indented by 6 spaces where the block's statements have 4",
        ),
        (
            "  x[0] = 1.0\n",
            "3:13: expected `  // e`, found the end of the line",
        ),
    ];
    for (body, want) in cases {
        let e = parse(&format!("{head}{body}")).expect_err(body);
        assert_eq!(e.to_string(), want);
    }
}

const HEAD: &str = "kernel k  grid(1, 1, 1)  block(32, 1, 1)\n  param x: f32[N] global in (t0)\n";

#[test]
fn deep_parentheses_are_an_error_not_a_stack_overflow() {
    let head = HEAD;
    let deep = format!(
        "{head}  x[{}1{}] = 1.0  // e0\n",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    let e = on_a_small_stack(move || parse(&deep).expect_err("too deep"));
    assert!(e.message.contains("nested"), "{e}");
}

#[test]
fn long_chains_are_an_error_not_a_stack_overflow() {
    let head = HEAD;
    let long = format!("{head}  x[{}1] = 1.0  // e0\n", "1 + ".repeat(100_000));
    let e = on_a_small_stack(move || parse(&long).expect_err("too deep"));
    assert!(e.message.contains("nested"), "{e}");
}

/// `f` on a thread with half a test thread's stack, so that the depth limits keep a margin
/// against frame sizes that move with the build (codegen units, a new expression kind).
fn on_a_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(f)
        .expect("a thread")
        .join()
        .expect("no stack overflow")
}

#[test]
fn deep_blocks_are_an_error_not_a_stack_overflow() {
    let head = HEAD;
    let mut loops = head.to_string();
    for d in 1..=1000 {
        loops.push_str(&format!("{}for i in 2 @Serial key 0:\n", "  ".repeat(d)));
    }
    let e = on_a_small_stack(move || parse(&loops).expect_err("too deep"));
    assert!(e.message.contains("nested"), "{e}");
}

#[test]
fn deep_values_are_an_error_not_a_stack_overflow() {
    let head = HEAD;
    let data = format!(
        "{head}  x[0] = {}1.0{}  // e0\n",
        "exp(".repeat(100_000),
        ")".repeat(100_000)
    );
    let e = on_a_small_stack(move || parse(&data).expect_err("too deep"));
    assert!(e.message.contains("nested"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn garbage_is_an_error_not_a_panic(text in "\\PC*") {
        check_rejects_cleanly(&text);
    }

    #[test]
    fn garbage_after_a_kernel_line_is_an_error_not_a_panic(
        body in "(  |[a-z_\\[\\]()*+<>=:,.@ 0-9-])*"
    ) {
        check_rejects_cleanly(&format!("kernel k  grid(1, 1, 1)  block(32, 1, 1)\n{body}"));
    }
}

/// Real dumps with characters deleted, duplicated or replaced: most are errors, some still
/// read; none panics.
#[test]
fn mutated_dumps_are_errors_not_panics() {
    use rand::{RngExt, SeedableRng};
    let dumps = dumps();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(32);
    let alphabet: Vec<char> = " \n[]()*+-<>=:,.@_x0123456789abceknt".chars().collect();
    let mut errors = 0;
    for _ in 0..2000 {
        let dump = &dumps[rng.random_range(0..dumps.len())];
        let mut chars: Vec<char> = dump.chars().collect();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..chars.len());
            match rng.random_range(0..3) {
                0 => {
                    chars.remove(at);
                }
                1 => chars.insert(at, chars[at]),
                _ => chars[at] = alphabet[rng.random_range(0..alphabet.len())],
            }
        }
        let text: String = chars.into_iter().collect();
        check_rejects_cleanly(&text);
        errors += usize::from(parse(&text).is_err());
    }
    assert!(errors > 700, "{errors} of 2000 mutated dumps are errors");
}
