//! The Python snippet of the PyTorch pane: how to call the program on the screen from PyTorch
//! with the `hopfuse` package (python/, README "From PyTorch"). Takes a compile's signature
//! ([`PythonCall`], made with every successful compile) and the sizes Run would use; emits
//! `import hopfuse`, `hopfuse.compile` of the program's text read from the file the pane's
//! "Download .hf" saves ([`PythonCall::file_name`]; `schedule="auto"` when the program has no
//! schedule block), random CUDA tensors of the inputs' dtypes and shapes at those sizes, and
//! the call with every scalar input as a keyword argument (the program's value, else 1).

use hopfuse::fusion::Fusion;
use hopfuse::plan::{SizeExpr, TensorRole};
use hopfuse::{DType, LaunchPlan};
use std::collections::BTreeMap;
use std::fmt::Write;

/// What the snippet needs of a compiled program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PythonCall {
    /// The program text, as compiled.
    pub source: String,
    /// The file the snippet reads the program from: `<fusion name>.hf`.
    pub file_name: String,
    /// The fusion's inputs in declaration order (the call's positional tensors, then its
    /// keyword scalars).
    pub inputs: Vec<CallInput>,
    /// The outputs in the order the call returns them.
    pub outputs: Vec<String>,
    /// The kernel's name (the snippet's variable when an input or output is called `kernel`).
    pub kernel_name: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CallInput {
    pub name: String,
    pub dtype: DType,
    /// The declared shape; empty for a scalar.
    pub dims: Vec<SizeExpr>,
    /// A scalar's value in the program (`input eps: f32 = 1e-6`).
    pub value: Option<f64>,
}

impl PythonCall {
    /// The signature of a compiled program: its fusion's inputs and its plan's outputs.
    pub fn new(source: &str, fusion: &Fusion, plan: &LaunchPlan) -> PythonCall {
        let inputs = fusion
            .inputs
            .iter()
            .map(|&t| {
                let tensor = &fusion.tensors[t];
                CallInput {
                    name: tensor.name.clone(),
                    dtype: tensor.dtype,
                    dims: fusion.root_shape(t),
                    value: tensor.value,
                }
            })
            .collect();
        PythonCall {
            source: source.to_string(),
            file_name: format!("{}.hf", fusion.name),
            inputs,
            outputs: plan
                .tensors()
                .filter(|(_, _, role, _)| *role == TensorRole::Output)
                .map(|(name, ..)| name.to_string())
                .collect(),
            kernel_name: plan.kernel_name.clone(),
        }
    }
}

/// torch's name of a dtype.
fn torch_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "torch.float32",
        DType::F16 => "torch.float16",
        DType::BF16 => "torch.bfloat16",
        DType::F64 => "torch.float64",
        DType::F8E4M3 => "torch.float8_e4m3fn",
        DType::F8E5M2 => "torch.float8_e5m2",
        DType::I64 => "torch.int64",
        DType::I32 => "torch.int32",
        DType::I8 => "torch.int8",
        DType::U8 => "torch.uint8",
        DType::Bool => "torch.bool",
    }
}

/// A random CUDA tensor of `dtype` and `shape` (Python's argument list of the sizes).
fn random_tensor(dtype: DType, shape: &str) -> String {
    let tuple = |s: &str| {
        if s.contains(',') {
            format!("({s})")
        } else {
            format!("({s},)")
        }
    };
    match dtype {
        // torch.randn has no 8-bit floats: draw in f32 and convert.
        DType::F8E4M3 | DType::F8E5M2 => format!(
            "torch.randn({shape}, device=\"cuda\").to({})",
            torch_dtype(dtype)
        ),
        d if d.is_float() => format!(
            "torch.randn({shape}, dtype={}, device=\"cuda\")",
            torch_dtype(d)
        ),
        DType::Bool => format!("torch.rand({shape}, device=\"cuda\") < 0.5"),
        d => format!(
            "torch.randint(0, 100, {}, dtype={}, device=\"cuda\")",
            tuple(shape),
            torch_dtype(d)
        ),
    }
}

/// A scalar keyword argument's value as Python writes it.
fn scalar_value(dtype: DType, value: Option<f64>) -> String {
    let v = value.unwrap_or(1.0);
    match dtype {
        DType::Bool => (if v != 0.0 { "True" } else { "False" }).to_string(),
        d if d.is_integer() => format!("{}", v as i64),
        // `{:?}` writes 1e-6 and 2.0, both Python float literals; the shortest that reads back
        // as the kernel's value (the program's f32 1e-6 is 9.99999997e-7 as an f64).
        DType::F64 => format!("{v:?}"),
        _ => format!("{:?}", v as f32),
    }
}

/// Whether the program has its own schedule block (else the package schedules it: "auto").
fn has_schedule_block(source: &str) -> bool {
    source.lines().any(|l| {
        l.trim_start()
            .strip_prefix("schedule")
            .is_some_and(|rest| rest.trim_start().starts_with('{'))
    })
}

/// The snippet for `call` at `sizes` (every size symbol of its plan; a shape whose expression
/// cannot be evaluated is written as the expression).
pub fn snippet(call: &PythonCall, sizes: &BTreeMap<String, i64>) -> String {
    let taken =
        |n: &str| call.inputs.iter().any(|i| i.name == n) || call.outputs.iter().any(|o| o == n);
    let kernel = if taken("kernel") {
        call.kernel_name.as_str()
    } else {
        "kernel"
    };
    let mut s = String::from("import hopfuse\nimport torch\n\n");
    let schedule = if has_schedule_block(&call.source) {
        ""
    } else {
        ", schedule=\"auto\""
    };
    let _ = writeln!(
        s,
        "# {0}: the program on the screen (Download .hf)\n\
         {kernel} = hopfuse.compile(open(\"{0}\").read(){schedule})",
        call.file_name
    );
    let mut args = Vec::new();
    for i in call.inputs.iter().filter(|i| !i.dims.is_empty()) {
        let shape = i
            .dims
            .iter()
            .map(|d| {
                d.eval(sizes)
                    .map_or_else(|_| d.to_string(), |v| v.to_string())
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(s, "{} = {}", i.name, random_tensor(i.dtype, &shape));
        args.push(i.name.clone());
    }
    for i in call.inputs.iter().filter(|i| i.dims.is_empty()) {
        args.push(format!("{}={}", i.name, scalar_value(i.dtype, i.value)));
    }
    let outputs = if call.outputs.is_empty() {
        "outputs".to_string()
    } else {
        call.outputs.join(", ")
    };
    let _ = writeln!(s, "{outputs} = {kernel}({})", args.join(", "));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_of(source: &str) -> PythonCall {
        let c = hopfuse::compile(source, &Default::default()).expect("compiles");
        PythonCall::new(source, &c.fusion, &c.plan)
    }

    fn example(path: &str) -> String {
        std::fs::read_to_string(format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR")))
            .expect("an example")
    }

    #[test]
    fn an_example_with_its_schedule_and_a_scalar() {
        let call = call_of(&example("fusions/rmsnorm.hf"));
        let sizes = BTreeMap::from([("M".to_string(), 1000)]);
        assert_eq!(
            snippet(&call, &sizes),
            "import hopfuse\nimport torch\n\n\
             # rmsnorm.hf: the program on the screen (Download .hf)\n\
             kernel = hopfuse.compile(open(\"rmsnorm.hf\").read())\n\
             x = torch.randn(1000, 4096, dtype=torch.bfloat16, device=\"cuda\")\n\
             w = torch.randn(4096, dtype=torch.bfloat16, device=\"cuda\")\n\
             y = kernel(x, w, eps=1e-6)\n"
        );
    }

    #[test]
    fn a_program_without_a_schedule_is_compiled_with_the_automatic_one() {
        let source =
            "fusion two {\n  input a: f32[M, N]\n  input k: i32[N]\n  input flag: bool[M]\n  \
                      input s: f32\n  y = a * s\n  z = sum(a, axis=1)\n  output y\n  output z\n}\n";
        let call = call_of(source);
        let sizes = BTreeMap::from([("M".to_string(), 64), ("N".to_string(), 8)]);
        let s = snippet(&call, &sizes);
        assert!(
            s.contains("kernel = hopfuse.compile(open(\"two.hf\").read(), schedule=\"auto\")\n"),
            "{s}"
        );
        assert!(
            s.contains("a = torch.randn(64, 8, dtype=torch.float32, device=\"cuda\")\n"),
            "{s}"
        );
        assert!(
            s.contains("k = torch.randint(0, 100, (8,), dtype=torch.int32, device=\"cuda\")\n"),
            "{s}"
        );
        assert!(
            s.contains("flag = torch.rand(64, device=\"cuda\") < 0.5\n"),
            "{s}"
        );
        // A scalar without a value in the program gets 1, after every tensor.
        assert!(s.ends_with("y, z = kernel(a, k, flag, s=1.0)\n"), "{s}");
    }

    #[test]
    fn an_input_called_kernel_keeps_its_name() {
        let source = "fusion scale {\n  input kernel: f16[N]\n  y = kernel * 2.0\n  output y\n}\n";
        let s = snippet(&call_of(source), &BTreeMap::from([("N".to_string(), 16)]));
        assert!(
            s.contains("scale_kernel = hopfuse.compile(open(\"scale.hf\")"),
            "{s}"
        );
        assert!(
            s.contains("kernel = torch.randn(16, dtype=torch.float16, device=\"cuda\")\n"),
            "{s}"
        );
        assert!(s.ends_with("y = scale_kernel(kernel)\n"), "{s}");
    }
}
