//! The parameters of the schedule primitives as data: what each argument's value is
//! ([`ArgKind`]), how it is given ([`Passing`]) and what it is when absent ([`IfAbsent`]). The
//! table of primitives (`table.rs`) is written in these terms and the argument checker
//! (`args.rs`) reads them; neither depends on the other.

/// What an argument's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A tensor of the fusion, by name.
    Tensor,
    /// A loop axis of the tensor acted on: an integer, negative counting from the end.
    Axis,
    /// An integer.
    Int,
    /// A parallel type (`ParallelType`).
    Parallel,
    /// A memory type: `global`, `shared` or `local`.
    Memory,
    /// How a cache is filled: `plain`, `tma` or `bulk`.
    Load,
    /// How an output is written from its cache: `plain` or `tma`.
    Store,
    /// Where the fence before a TMA store goes.
    Fence,
    /// How a circular buffer knows a slot is free: `sync` or `mbarrier`.
    War,
    /// A TMA box's shared-memory swizzle: `none`, 32, 64 or 128 (bytes).
    Swizzle,
    /// A keyword of the primitive (`inner`, `stream_k`): what each means is the primitive's
    /// to check and say.
    Keyword(&'static [&'static str]),
    /// A list of two integers, e.g. `[producer, consumer]` (what each is).
    IntPair(&'static str, &'static str),
    /// A nested call with its own parameters (`warp_specialized(...)`).
    Call(&'static Nested),
}

impl ArgKind {
    /// The keywords a name argument of this kind may be (empty for the other kinds); checked
    /// before the primitive is applied.
    pub fn choices(self) -> &'static [&'static str] {
        match self {
            ArgKind::Parallel => &[
                "Serial",
                "BIDx",
                "BIDy",
                "BIDz",
                "TIDx",
                "TIDy",
                "TIDz",
                "Vectorize",
                "Unroll",
                "Bulk",
                "Mma",
            ],
            ArgKind::Memory => &["global", "shared", "local"],
            ArgKind::Load => &["plain", "tma", "bulk"],
            ArgKind::Store => &["plain", "tma"],
            ArgKind::Fence => &["analysis", "per_store", "issuing_warp"],
            ArgKind::War => &["sync", "mbarrier"],
            ArgKind::Keyword(words) => words,
            _ => &[],
        }
    }
    /// What an unknown keyword of this kind is called in the error ("unknown load kind").
    pub fn noun(self) -> &'static str {
        match self {
            ArgKind::Tensor => "tensor",
            ArgKind::Axis => "loop axis",
            ArgKind::Int => "integer",
            ArgKind::Parallel => "parallel type",
            ArgKind::Memory => "memory",
            ArgKind::Load => "load kind",
            ArgKind::Store => "store kind",
            ArgKind::Fence => "fence placement",
            ArgKind::War => "write-after-read mode",
            ArgKind::Swizzle => "swizzle",
            ArgKind::Keyword(_) => "keyword",
            ArgKind::IntPair(..) => "list of two integers",
            ArgKind::Call(n) => n.name,
        }
    }
    /// What a value of this kind looks like, for the reference and the wrong-kind error.
    pub fn describe(self) -> String {
        match self {
            ArgKind::Tensor => "a tensor name".into(),
            ArgKind::Axis => "a loop axis (an integer, negative from the end)".into(),
            ArgKind::Int => "an integer".into(),
            ArgKind::Swizzle => "none, 32, 64 or 128 (bytes)".into(),
            ArgKind::IntPair(a, b) => format!("a list of two integers [{a}, {b}]"),
            ArgKind::Call(n) => format!("{}(...)", n.name),
            k => format!("one of: {}", either(k.choices())),
        }
    }
}

/// `a, b or c`.
pub fn either(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// How an argument is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passing {
    /// By position only.
    Positional,
    /// By position or as `name=value`.
    Either,
    /// As `name=value` only.
    Named,
}

/// Whether an argument must be given, and what it is when it is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfAbsent {
    Required,
    /// Absent means this value, written as the argument would be (read through the same
    /// parser as a given argument).
    Is(&'static str),
    /// Absent means a value the primitive computes, described.
    Computed(&'static str),
    /// Absent means the option is off.
    Off,
    /// Zero or more further positional arguments of this kind (the last parameter).
    Many,
}

/// One parameter of a primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ArgKind,
    pub passing: Passing,
    pub default: IfAbsent,
}

pub(super) const fn pos(name: &'static str, kind: ArgKind) -> Param {
    Param {
        name,
        kind,
        passing: Passing::Positional,
        default: IfAbsent::Required,
    }
}

pub(super) const fn opt(name: &'static str, kind: ArgKind, default: IfAbsent) -> Param {
    Param {
        name,
        kind,
        passing: Passing::Positional,
        default,
    }
}

pub(super) const fn named(name: &'static str, kind: ArgKind, default: IfAbsent) -> Param {
    Param {
        name,
        kind,
        passing: Passing::Named,
        default,
    }
}

/// A call written as an argument of a primitive, with parameters of its own.
#[derive(Debug, PartialEq, Eq)]
pub struct Nested {
    pub name: &'static str,
    pub written: &'static str,
    pub params: &'static [Param],
    /// What it does, for the reference (empty in wasm32 builds, see `table`'s `doc!`).
    pub doc: &'static str,
}
