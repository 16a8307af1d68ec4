//! Facts of the CUDA C++ dialect the back end emits, needed before the back end runs: which
//! identifiers a user may not take (they would reach the kernel verbatim as tensor, parameter or
//! size names) and which the passes must step around when they derive names of their own.

/// C++20 keywords and alternative tokens, and the CUDA names every kernel sees.
const KEYWORDS: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "co_await",
    "co_return",
    "co_yield",
    "compl",
    "concept",
    "const",
    "const_cast",
    "consteval",
    "constexpr",
    "constinit",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    "final",
    "override",
    "main",
    "restrict",
];

/// Built-in variables, types and functions of CUDA device code, and the names of the emitted
/// kernel's own declarations (`index_t`; helpers are all `hf_*`).
const CUDA_NAMES: &[&str] = &[
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "clusterIdx",
    "clusterDim",
    "index_t",
    "size_t",
    "ptrdiff_t",
    "uint",
    "dim3",
    "float2",
    "float4",
    "int2",
    "int4",
    "half",
    "half2",
    "nv_bfloat16",
    "nv_bfloat162",
    "CUtensorMap",
    "min",
    "max",
    "abs",
    "exp",
    "expf",
    "log",
    "logf",
    "sqrt",
    "sqrtf",
    "tanh",
    "tanhf",
    "erf",
    "erff",
    "fabs",
    "fabsf",
    "fmaxf",
    "fminf",
    "rsqrtf",
    "printf",
    "assert",
    "memcpy",
    "memset",
    "malloc",
    "free",
    "std",
    "cuda",
    "cute",
    "cutlass",
    "NULL",
    // The math functions the generated kernel calls (`codegen/expr.rs`: the double name, and
    // the float one with `f`): a tensor of that name would hide the function in the kernel.
    "ceil",
    "ceilf",
    "cos",
    "cosf",
    "sin",
    "sinf",
    "exp2",
    "exp2f",
    "expm1",
    "expm1f",
    "floor",
    "floorf",
    "fma",
    "fmaf",
    "fmax",
    "fmin",
    "fmod",
    "fmodf",
    "log1p",
    "log1pf",
    "log2",
    "log2f",
    "pow",
    "powf",
    "rint",
    "rintf",
    "rsqrt",
    "trunc",
    "truncf",
    "isnan",
    "isinf",
    "signbit",
    "llabs",
    "make_float4",
    // Macros of the math headers the kernel includes: the preprocessor would replace the name.
    "INFINITY",
    "NAN",
    "HUGE_VAL",
    "HUGE_VALF",
];

/// Why `name` cannot name something in the emitted CUDA (`None` when it can).
pub fn reserved_reason(name: &str) -> Option<&'static str> {
    if KEYWORDS.contains(&name) {
        Some("a C++ keyword")
    } else if CUDA_NAMES.contains(&name) {
        Some("a name CUDA or the generated kernel already uses")
    } else if name.starts_with("__")
        || (name.starts_with('_') && name[1..].starts_with(|c: char| c.is_ascii_uppercase()))
    {
        Some("reserved to the C++ implementation (it starts with `__` or `_` and a capital)")
    } else if name.starts_with("hf_") {
        Some("reserved for the generated kernel's helpers (`hf_` prefix)")
    } else {
        None
    }
}

/// Every fixed name the passes must not derive (for fresh-name generation).
pub fn fixed_reserved() -> impl Iterator<Item = &'static str> {
    KEYWORDS.iter().chain(CUDA_NAMES).copied()
}

#[cfg(test)]
mod tests {
    use super::reserved_reason;

    #[test]
    fn reserved_names() {
        for n in [
            "int",
            "asm",
            "template",
            "threadIdx",
            "index_t",
            "__LINE__",
            "_Bool",
            "hf_smem",
        ] {
            assert!(reserved_reason(n).is_some(), "{n}");
        }
        for n in ["x", "x_s", "_x", "acc", "M", "softmax"] {
            assert!(reserved_reason(n).is_none(), "{n}");
        }
    }
}
