//! The language reference: every keyword, dtype, op, schedule statement, parallel type, memory
//! and load kind, with its signature and what it does. One table feeds the page's Reference
//! dialog, the editor's autocompletion and hover docs (through `web/reference.json`, [`json`]),
//! and `docs/language.md` ([`markdown`]). Both files are generated: a test fails when either
//! differs from the table, and `HOPFUSE_BLESS=1 cargo test -p hopfuse-web --lib reference`
//! rewrites them. The schedule primitives are not restated here: their section is the
//! compiler's own table of them (`hopfuse::fusion::schedule::table`, [`schedule_entries`]). Tests
//! check the rest against the compiler's lists.
//!
//! The page does not compile this table in: `js/editor.js` fetches `reference.json` the first
//! time the dialog opens, a completion is asked for or a name is hovered, which keeps about 3 KiB
//! of brotli out of the cold load.

use crate::examples;
use hopfuse::fusion::ops::OPS;
use hopfuse::fusion::schedule::table;
use serde::Serialize;
use std::borrow::Cow;

/// What an entry is; the sections of the reference, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Keyword,
    Dtype,
    Op,
    Schedule,
    Parallel,
    Memory,
    Load,
    Argument,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Keyword,
        Kind::Dtype,
        Kind::Op,
        Kind::Schedule,
        Kind::Parallel,
        Kind::Memory,
        Kind::Load,
        Kind::Argument,
    ];
    pub fn title(self) -> &'static str {
        match self {
            Kind::Keyword => "Program structure",
            Kind::Dtype => "Dtypes",
            Kind::Op => "Ops (in the fusion)",
            Kind::Schedule => "Schedule primitives",
            Kind::Parallel => "Parallel types",
            Kind::Memory => "Memory kinds",
            Kind::Load => "Load and store kinds",
            Kind::Argument => "Named arguments and their values",
        }
    }
    /// The section's anchor (in the page and in docs/language.md).
    pub fn anchor(self) -> &'static str {
        match self {
            Kind::Keyword => "structure",
            Kind::Dtype => "dtypes",
            Kind::Op => "ops",
            Kind::Schedule => "schedule",
            Kind::Parallel => "parallel",
            Kind::Memory => "memory",
            Kind::Load => "loads",
            Kind::Argument => "arguments",
        }
    }
}

/// One name of the language.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    pub name: &'static str,
    pub kind: Kind,
    /// How it is written.
    pub signature: &'static str,
    /// What it does (for an op, with its result type: composed from the compiler's op table).
    pub doc: Cow<'static, str>,
}

const fn e(name: &'static str, kind: Kind, signature: &'static str, doc: &'static str) -> Entry {
    Entry {
        name,
        kind,
        signature,
        doc: Cow::Borrowed(doc),
    }
}

use Kind::*;

/// Every entry but the ops and the schedule primitives, which come from the compiler's tables
/// ([`of_kind`]).
pub const ENTRIES: &[Entry] = &[
    e("fusion", Keyword, "fusion NAME { ... }", "The computation: inputs, assignments and outputs, one statement a line (or separated by `;`). An assignment names one tensor (`y = exp(x)`), or each tensor of a call that gives several (`v, m = var_mean(x, axis=1)`). The kernel is named NAME_kernel."),
    e("schedule", Keyword, "schedule { ... }", "How the fusion is lowered: statements applied in order after the fusion. Optional; without it every tensor gets one serial loop nest."),
    e("input", Keyword, "input x: f32[M, N] | input eps: f32 = 1e-6 | input t: f32[]", "A tensor the kernel reads: its dtype and extents, each a size symbol (M, N: set in the sizes boxes) or a positive integer; at most 8 dimensions. A size symbol is also a number in any later expression (x / N, iota(x, axis=1) == N - 1, x * (M * N)): the run's value, an integer as torch's x.shape[1] is (so x * N of an i32 tensor stays i32); sizes combine among themselves only as a product of symbols or a symbol plus or minus an integer. Without extents, a scalar passed to the kernel by value, usable in any expression; `= value` gives the value a run passes (without it, a run draws one in [-1, 1) like any input's values). With empty extents (`f32[]`), a 0-d tensor: one element in global memory that the kernel reads through a pointer (a scalar another kernel wrote: a split fusion's scalar intermediate)."),
    e("output", Keyword, "output y", "Marks a computed tensor as a result, written to global memory. A scalar (a reduction over every axis, `t = sum(x, axis=[0, 1])`) is a one-element output; with its reduction axes bound to blockIdx it is a grid reduction (each block reduces its part, the last block to finish combines the blocks' values in block order, so every launch gives the same bits), which the automatic schedule writes for a fusion of such reductions (examples/auto/total_sum.hf)."),
    e("f32", Dtype, "f32", "32-bit float."),
    e("f16", Dtype, "f16", "16-bit IEEE half float (math in f32)."),
    e("bf16", Dtype, "bf16", "16-bit bfloat (math in f32)."),
    e("f8e4m3", Dtype, "f8e4m3", "8-bit float, 4 exponent and 3 mantissa bits, no infinity (torch.float8_e4m3fn; math in f32): largest finite 448; a cast beyond it is NaN unless saturate=true."),
    e("f8e5m2", Dtype, "f8e5m2", "8-bit float, 5 exponent and 2 mantissa bits (torch.float8_e5m2; math in f32): largest finite 57344; a cast beyond it is an infinity unless saturate=true."),
    e("i64", Dtype, "i64", "64-bit signed integer (the reference holds it exactly up to 2^53)."),
    e("i32", Dtype, "i32", "32-bit signed integer."),
    e("i8", Dtype, "i8", "8-bit signed integer; arithmetic wraps, as torch's int8 (mixing with u8 is refused: torch gives int16)."),
    e("u8", Dtype, "u8", "8-bit unsigned integer; arithmetic wraps, as torch's uint8."),
    e("f64", Dtype, "f64", "64-bit float."),
    e("bool", Dtype, "bool", "A truth value, stored as one byte (0 or 1): what comparisons, isnan and the logical ops give."),
    e("Serial", Parallel, "Serial", "An ordinary loop (the default)."),
    e("BIDx", Parallel, "BIDx", "blockIdx.x: one block per index (grid x up to 2^31 - 1). Bound to a reduction axis, a grid reduction: the tensor must be a scalar output that nothing else in the kernel reads, every block dim of the grid bound to its reduction axes, and the grid at most 65536 blocks."),
    e("BIDy", Parallel, "BIDy", "blockIdx.y (grid y up to 65535)."),
    e("BIDz", Parallel, "BIDz", "blockIdx.z (grid z up to 65535)."),
    e("TIDx", Parallel, "TIDx", "threadIdx.x: one thread per index (at most 1024 threads a block)."),
    e("TIDy", Parallel, "TIDy", "threadIdx.y."),
    e("TIDz", Parallel, "TIDz", "threadIdx.z (at most 64)."),
    e("Vectorize", Parallel, "Vectorize", "One vector load or store of the axis (constant power-of-two extent, at most 16 bytes)."),
    e("Unroll", Parallel, "Unroll", "A loop unrolled by the compiler."),
    e("Bulk", Parallel, "Bulk", "The axes one TMA or bulk copy covers (the box), on a cache made with load=tma|bulk or an output with store=tma, dimensions in order. On a load=tma cache the leading Bulk axes may be outer pieces of a dimension that comes again further in: they count boxes side by side, each its own copy (a K tile of two swizzle spans: examples/matmul/step8_wide_k_tile.hf)."),
    e("Mma", Parallel, "Mma", "The instruction tile of a tensor-core product (wgmma m64nNk16 on f16/bf16, m64nNk32 on f8e4m3/f8e5m2): M = 64, N and K = 16 (32 for 8-bit operands: 32 bytes of each row) of a sum of products of two swizzled shared caches (f16 or bf16 of one type, or two 8-bit floats in any mix; 8-bit operands K-major), or of a 16-bit register fragment by a shared cache (A from registers: attention's P, examples/attention/online_wgmma.hf), and the M and N axes of the tensors that read its accumulator. The block's threadIdx.x is the 128 threads of a warp group."),
    e("global", Memory, "memory=global", "Device memory."),
    e("shared", Memory, "memory=shared", "The block's shared memory (up to 227 KB on an H100)."),
    e("local", Memory, "memory=local", "Registers of each thread."),
    e("plain", Load, "load=plain | store=plain", "Ordinary loads or stores by every thread (the default)."),
    e("tma", Load, "load=tma | store=tma", "Tensor Memory Accelerator copies of a box (cp.async.bulk.tensor) between global and shared memory, through a tensor map."),
    e("bulk", Load, "load=bulk", "1-D bulk copies (cp.async.bulk) of one contiguous run, no tensor map and no out-of-bounds fill."),
    e("axis", Argument, "axis=1 | axis=[0, 1]", "The axes of a reduction or of a broadcast (also `axes=`)."),
    e("memory", Argument, "memory=local|shared|global", "Where a cache lives."),
    e("load", Argument, "load=plain|tma|bulk", "How a cache is filled."),
    e("store", Argument, "store=plain|tma", "How an output is written from its cache_before cache."),
    e("fence", Argument, "fence=analysis|per_store|issuing_warp", "Where the async-proxy fence before a TMA store goes (analysis: chosen by the sync analysis)."),
    e("swizzle", Argument, "swizzle=none|32|64|128", "Shared-memory swizzle of a TMA box, in bytes (the inner box row must be that wide)."),
    e("row_pad", Argument, "row_pad=n", "Elements after each row of a plain shared-memory cache's innermost axis (0 to 128), so threads reading down its columns hit different banks (a transpose's tile)."),
    e("from", Argument, "t.recompute(from=p)", "Of recompute: the copies stop at p, a tensor t is computed from, which is kept between the loops instead (a bf16 cache of the row rather than its f32 values)."),
    e("l2", Argument, "cache_after(x, l2=normal|evict_last|evict_first)", "How the plain loads of fusion input x use L2 (PTX createpolicy and ld.global.L2::cache_hint): evict_last keeps the lines it reads and evicts others first; one policy per input."),
    e("normal", Argument, "cache_after(x, l2=normal)", "Plain loads of the input (the default)."),
    e("evict_last", Argument, "cache_after(x, l2=evict_last)", "The input's loads ask L2 to keep the lines they read and evict others first (a row read by a norm: examples/fusions/add_rmsnorm.hf)."),
    e("evict_first", Argument, "cache_after(x, l2=evict_first)", "The input's loads ask L2 to evict the lines they read first."),
    e("prefetch", Argument, "prefetch=N", "Loads issued ahead of the iteration that consumes them (0 <= prefetch < stages)."),
    e("war", Argument, "war=sync|mbarrier", "How a slot is known free for refilling: a block barrier each iteration (sync) or empty mbarriers (mbarrier, TMA and bulk copies)."),
    e("registers", Argument, "registers=[producer, consumer]", "Registers per thread of the producer and consumer warp groups (setmaxnreg)."),
    e("warp", Argument, "warp=0..3", "The producer warp that issues this cache's loads."),
    e("turns", Argument, "turns=products", "Of warp_specialized: the consumer thread groups along its dim, which share every stage, take turns issuing their tensor-core products (named barriers), so one group's softmax overlaps the other's products (examples/attention/online_wgmma_pingpong.hf)."),
    e("overlap", Argument, "overlap=products", "Of online_softmax: FlashAttention-3's order inside a warp group, the previous tile's P V product in flight on the tensor cores while this tile's softmax runs (S_j issued first, wait_group 1, the softmax, wait_group 0); needs K and V warp-specialized with empty mbarriers (examples/attention/online_wgmma_overlap.hf)."),
    e("products", Argument, "warp_specialized(TIDy, turns=products) | online_softmax(o, overlap=products)", "The turns of warp_specialized's consumer groups are taken around each wgmma group: wait for the turn before its fence, pass it right after its commit. online_softmax's overlap: the P V product of tile j - 1 runs during tile j's softmax."),
    e("inner", Argument, "t.split(axis, factor, inner)", "The inner part of the split has extent `factor` (the default)."),
    e("outer", Argument, "t.split(axis, factor, outer)", "The outer part of the split has extent `factor`."),
    e("stream_k", Argument, "persistent(BIDy, 16, stream_k)", "After the whole rounds of tiles, the k steps of the tiles left are split evenly over every CTA (stream-K), partial sums combined through a workspace."),
];

/// The reference as the page fetches it (`web/reference.json`): its sections in order, each
/// `{title, anchor, entries: [{name, kind, signature, doc}]}`.
pub fn json() -> String {
    #[derive(Serialize)]
    struct Section {
        title: &'static str,
        anchor: &'static str,
        entries: Vec<Entry>,
    }
    let sections: Vec<Section> = Kind::ALL
        .iter()
        .map(|&kind| Section {
            title: kind.title(),
            anchor: kind.anchor(),
            entries: of_kind(kind),
        })
        .collect();
    serde_json::to_string_pretty(&sections).expect("entries serialize") + "\n"
}

/// The entries of one section, in order: the ops from `hopfuse::fusion::ops::OPS` (name,
/// signature, doc and typing rule), the schedule primitives from the compiler's table
/// ([`schedule_entries`]), the rest from [`ENTRIES`].
pub fn of_kind(kind: Kind) -> Vec<Entry> {
    match kind {
        Kind::Op => OPS
            .iter()
            .map(|d| Entry {
                name: d.name,
                kind,
                signature: d.signature,
                doc: Cow::Owned(format!("{} Result: {}.", d.doc, d.typing.describe())),
            })
            .collect(),
        Kind::Schedule => schedule_entries().collect(),
        _ => ENTRIES.iter().filter(|e| e.kind == kind).cloned().collect(),
    }
}

/// The schedule section, from the compiler's table of primitives: each primitive, followed by
/// the nested calls its arguments may be (`warp_specialized` after `circular_buffer`).
pub fn schedule_entries() -> impl Iterator<Item = Entry> {
    table::PRIMITIVES.iter().flat_map(|p| {
        let nested = p
            .nested()
            .map(|n| e(n.name, Kind::Schedule, n.written, n.doc));
        std::iter::once(e(p.name, Kind::Schedule, p.written, p.doc)).chain(nested)
    })
}

/// The reference as Markdown (docs/language.md).
pub fn markdown() -> String {
    let mut out = String::from(
        "# The hopfuse language\n\n\
         <!-- Generated from web/src/reference.rs (the playground's Reference dialog, completion\n\
         and hover docs show the same table): edit it there, then run\n\
         `HOPFUSE_BLESS=1 cargo test -p hopfuse-web --lib reference`. -->\n\n\
         A program is a `fusion` (tensors and ops) and an optional `schedule` (how its loops are\n\
         split, parallelized, cached and pipelined). In the playground (`scripts/run.sh`), the\n\
         Reference button shows this page; typing in the editor completes these names and the\n\
         tensors of the program, and hovering a name shows its entry.\n\n\
         ```\n\
         fusion add {\n  input a: f32[M, N]\n  input b: f32[M, N]\n  c = a + b\n  output c\n}\n\
         schedule {\n  c.merge(0)\n  c.split(0, 4)\n  c.split(0, 128)\n  c.parallelize(0, BIDx)\n  \
         c.parallelize(1, TIDx)\n  c.parallelize(2, Vectorize)\n  propagate(c)\n  inline_most()\n}\n\
         ```\n\n\
         Axes are numbered from 0 (outermost). Comments start with `//`; a line `// bench: M=...,N=...`\n\
         gives the sizes `hopfuse bench` and the playground's Examples menu use.\n",
    );
    for kind in Kind::ALL {
        out.push_str(&format!(
            "\n## {}\n\n| name | written | what it does |\n| --- | --- | --- |\n",
            kind.title()
        ));
        for e in of_kind(kind) {
            out.push_str(&format!(
                "| `{}` | `{}` | {} |\n",
                e.name,
                e.signature.replace('|', "\\|"),
                e.doc.replace('|', "\\|")
            ));
        }
    }
    out.push_str(
        "\n## Examples\n\nEvery program under `examples/` (the playground's Examples menu):\n\n",
    );
    for (group, list) in examples::grouped() {
        out.push_str(&format!("- {}:\n", examples::group_title(group)));
        for ex in list {
            out.push_str(&format!(
                "  - [`{}/{}`](../examples/{}/{}.hf): {}\n",
                ex.group,
                ex.name,
                ex.group,
                ex.name,
                examples::description(&ex)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse::fusion::{LoadKind, MemoryType, ParallelType, UnaryOp};

    fn names(kind: Kind) -> Vec<&'static str> {
        of_kind(kind).into_iter().map(|e| e.name).collect()
    }

    #[test]
    fn the_table_matches_the_compiler() {
        let ops = names(Kind::Op);
        for u in UnaryOp::ALL {
            assert!(ops.contains(&u.def().name), "op {} is missing", u.name());
        }
        let parallel = names(Kind::Parallel);
        assert_eq!(parallel.len(), ParallelType::ALL.len());
        for p in ParallelType::ALL {
            assert!(parallel.contains(&p.name()), "{} is missing", p.name());
        }
        for m in [MemoryType::Global, MemoryType::Shared, MemoryType::Local] {
            assert!(names(Kind::Memory).contains(&m.name()));
        }
        for l in [LoadKind::Plain, LoadKind::Tma, LoadKind::Bulk] {
            assert!(names(Kind::Load).contains(&l.name()));
        }
        for d in names(Kind::Dtype) {
            assert!(hopfuse::DType::parse(d).is_some(), "{d}");
        }
        assert_eq!(names(Kind::Dtype).len(), hopfuse::DType::ALL.len());
        // Every op and schedule primitive listed is one the compiler knows: a call of it fails,
        // if at all, for another reason than an unknown name.
        let fusion =
            |body: &str| format!("fusion f {{\n  input a: f32[M, N]\n  {body}\n  output c\n}}\n");
        for op in ops {
            let e = hopfuse::compile(&fusion(&format!("c = {op}(a)")), &Default::default());
            if let Err(d) = e {
                assert!(!d.to_string().contains("unknown function"), "{op}: {d}");
            }
        }
        assert!(
            hopfuse::compile(&fusion("c = frobnicate(a)"), &Default::default())
                .unwrap_err()
                .to_string()
                .contains("unknown function")
        );
        for s in names(Kind::Schedule)
            .into_iter()
            .filter(|s| *s != "warp_specialized")
        {
            let stmt = match s {
                "cache_after" | "cache_before" => format!("x = {s}(a)"),
                "propagate" | "inline_most" | "online_softmax" => format!("{s}(c)"),
                "cluster" | "persistent" => format!("{s}(BIDx, 2)"),
                _ => format!("c.{s}()"),
            };
            let src = format!("{}schedule {{\n  {stmt}\n}}\n", fusion("c = exp(a)"));
            if let Err(d) = hopfuse::compile(&src, &Default::default()) {
                assert!(!d.to_string().contains("unknown schedule"), "{s}: {d}");
            }
        }
        let src = format!(
            "{}schedule {{\n  c.frobnicate()\n}}\n",
            fusion("c = exp(a)")
        );
        assert!(hopfuse::compile(&src, &Default::default())
            .unwrap_err()
            .to_string()
            .contains("unknown schedule method"));
    }

    #[test]
    fn names_are_unique_and_documented() {
        let mut seen = std::collections::HashSet::new();
        for e in Kind::ALL.into_iter().flat_map(of_kind) {
            assert!(seen.insert(e.name), "{} twice", e.name);
            assert!(!e.doc.is_empty() && e.doc.ends_with('.'), "{}", e.name);
        }
        let sections: serde_json::Value = serde_json::from_str(&json()).unwrap();
        assert_eq!(sections[0]["title"], "Program structure");
        assert_eq!(sections[0]["entries"][0]["name"], "fusion");
        assert_eq!(sections[3]["entries"][0]["kind"], "schedule");
    }

    #[test]
    fn the_schedule_section_is_the_compilers_table_of_primitives() {
        let section: Vec<Entry> = of_kind(Kind::Schedule);
        let mut want = Vec::new();
        for p in table::PRIMITIVES {
            want.push((p.name, p.written, p.doc));
            want.extend(p.nested().map(|n| (n.name, n.written, n.doc)));
        }
        let have: Vec<_> = section
            .iter()
            .map(|e| (e.name, e.signature, e.doc.as_ref()))
            .collect();
        assert_eq!(have, want);
        assert!(ENTRIES.iter().all(|e| e.kind != Kind::Schedule));
        // The generated reference carries every primitive.
        let sections: serde_json::Value = serde_json::from_str(&json()).unwrap();
        let listed = &sections[3]["entries"];
        for p in table::PRIMITIVES {
            assert!(
                listed
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e["name"] == p.name),
                "{} is missing from reference.json",
                p.name
            );
            assert!(markdown().contains(&format!("| `{}` |", p.name)));
        }
    }

    #[test]
    fn every_named_argument_and_keyword_of_the_table_is_documented() {
        let arguments = names(Kind::Argument);
        for p in table::PRIMITIVES {
            let params = p.params.iter().chain(p.nested().flat_map(|n| n.params));
            for q in params {
                if q.passing != table::Passing::Positional {
                    assert!(arguments.contains(&q.name), "{}: {}=", p.name, q.name);
                }
                if let table::ArgKind::Keyword(words) = q.kind {
                    for w in words {
                        assert!(arguments.contains(w), "{}: {w}", p.name);
                    }
                }
            }
        }
    }

    /// Compares a generated file with what the table makes of it (rewrites it under
    /// HOPFUSE_BLESS).
    fn assert_current(relative: &str, want: String) {
        let path = format!("{}/../{relative}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("HOPFUSE_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{relative} is not the reference in web/src/reference.rs: run \
             HOPFUSE_BLESS=1 cargo test -p hopfuse-web --lib reference"
        );
    }

    #[test]
    fn docs_language_md_is_current() {
        assert_current("docs/language.md", markdown());
    }

    #[test]
    fn web_reference_json_is_current() {
        assert_current("web/reference.json", json());
    }
}
