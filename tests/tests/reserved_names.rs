//! A tensor's name reaches the CUDA verbatim, so every function the generated kernel calls and
//! every macro of the headers it includes must be a name the language refuses: a tensor named
//! `powf` would hide the function inside the kernel, one named `INFINITY` would be replaced by
//! the preprocessor (issue 39 item 13). Each op is compiled and the names its kernel calls are
//! checked against `cuda::reserved_reason`.

use hopfuse::cuda::reserved_reason;
use hopfuse::fusion::ops::{OpKind, OPS};

/// The names called in the kernel's body: identifiers before a `(`.
fn called(cuda: &str) -> Vec<String> {
    let kernel = &cuda[cuda.find("__global__").expect("a kernel")..];
    // From the body's brace: the signature names the kernel itself.
    let body = &kernel[kernel.find(") {").expect("a kernel body")..];
    let bytes = body.as_bytes();
    let mut names = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if b != b'(' {
            continue;
        }
        let end = i;
        let mut start = end;
        while start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            start -= 1;
        }
        if start < end && !bytes[start].is_ascii_digit() {
            names.push(body[start..end].to_string());
        }
    }
    names
}

fn program(op: &str, arity: usize, dtype: &str) -> String {
    let operands = vec!["x"; arity].join(", ");
    format!("fusion f {{\n  input x: {dtype}[N]\n  y = {op}({operands})\n  output y\n}}\n")
}

#[test]
fn every_function_an_ops_kernel_calls_is_a_reserved_name() {
    let mut compiled = 0;
    for def in OPS {
        let arity = match def.kind {
            OpKind::Unary(_) => 1,
            OpKind::Binary(_) | OpKind::ElementwiseOrReduce(..) => 2,
            OpKind::Ternary(_) => 3,
            _ => continue,
        };
        // Every op in every dtype (float function names differ by type; integer and 8-bit
        // types convert through their own helpers).
        for dtype in hopfuse::DType::ALL.map(|d| d.name()) {
            let Ok(c) = hopfuse::compile(&program(def.name, arity, dtype), &Default::default())
            else {
                continue;
            };
            compiled += 1;
            for name in called(&c.cuda) {
                assert!(
                    reserved_reason(&name).is_some(),
                    "`{}` on {dtype} calls `{name}`, which a tensor may be named",
                    def.name
                );
            }
        }
    }
    assert!(compiled > 60, "only {compiled} op kernels compiled");
}

#[test]
fn a_tensor_named_like_a_math_function_or_macro_is_refused() {
    for name in ["powf", "sinf", "log2f", "INFINITY", "NAN", "isnan"] {
        let src =
            format!("fusion f {{\n  input x: f32[N]\n  {name} = exp(x)\n  output {name}\n}}\n");
        let e = hopfuse::compile(&src, &Default::default())
            .expect_err(name)
            .to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
}
