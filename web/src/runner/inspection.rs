//! The answer of `POST /api/inspect` read into `api::inspect::Inspection`, the runner's own
//! type (the PTX and SASS panes draw it, `inspect_panes.rs`).

use super::fields::{Fields, Read};
use hopfuse::IndexType;
use hopfuse_api as api;
use serde_json::Value;

/// The answer of `POST /api/inspect` (`api::inspect::Inspection`), built into the runner's own
/// type (the PTX and SASS panes draw it, `inspect_panes.rs`).
pub(crate) fn read_inspection(v: &Value) -> Read<api::inspect::Inspection> {
    use api::inspect::{Inspection, Listing, Resources, Variant, Warning};
    use hopfuse::codegen::lines::{CudaLine, LineMap};
    let i = Fields::of(v, "the inspection")?;
    let line = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    let lines_of = |l: Fields, k: &str| -> Read<Vec<Option<u32>>> {
        (l.list(k)?.iter())
            .map(|n| match n {
                Value::Null => Ok(None),
                n => line(n)
                    .map(Some)
                    .ok_or(format!("`{k}` is not line numbers")),
            })
            .collect()
    };
    let listing = |l: Fields| -> Read<Listing> {
        Ok(Listing {
            text: l.str("text")?.to_string(),
            cuda_lines: lines_of(l, "cuda_lines")?,
            inlined: lines_of(l, "inlined")?,
            no_source_line: l.opt("no_source_line", Value::as_u64)?.unwrap_or(0) as usize,
        })
    };
    let variant = i.obj("variant")?;
    let index_type = match variant.str("index_type")? {
        "i32" => IndexType::I32,
        "i64" => IndexType::I64,
        other => return Err(format!("unknown `index_type` `{other}`")),
    };
    let cuda_line = |l: &Value| -> Read<CudaLine> {
        let l = Fields::of(l, "lines")?;
        let ir_line = || l.u64("ir_line").map(|n| n as usize);
        Ok(match l.str("kind")? {
            "prelude" => CudaLine::Prelude,
            "signature" => CudaLine::Signature,
            "setup" => CudaLine::Setup,
            "binding" => CudaLine::Binding {
                ir_line: ir_line()?,
                pass: l.opt_str("pass")?,
            },
            "stmt" => CudaLine::Stmt {
                stmt: l.u64("stmt")? as usize,
                ir_line: ir_line()?,
                pass: l.opt_str("pass")?,
            },
            other => return Err(format!("unknown CUDA line kind `{other}`")),
        })
    };
    let r = i.obj("resources")?;
    let u32_of = |k: &str| r.opt(k, line);
    let warning = |w: &Value| -> Read<Warning> {
        let w = Fields::of(w, "warnings")?;
        Ok(Warning {
            text: w.str("text")?.to_string(),
            cuda_line: w.opt("cuda_line", line)?,
        })
    };
    let strings = |k: &str| -> Read<Vec<String>> {
        (i.list(k)?.iter())
            .map(|s| {
                s.as_str()
                    .map(String::from)
                    .ok_or(format!("`{k}` is not strings"))
            })
            .collect()
    };
    Ok(Inspection {
        kernel: i.str("kernel")?.to_string(),
        variant: Variant {
            index_type,
            assume_aligned_vectors: variant.bool("assume_aligned_vectors")?,
            reason: variant.str("reason")?.to_string(),
        },
        cuda: i.str("cuda")?.to_string(),
        ir: i.str("ir")?.to_string(),
        lines: LineMap {
            lines: (i.obj("lines")?.list("lines")?.iter())
                .map(cuda_line)
                .collect::<Read<_>>()?,
        },
        ptx: listing(i.obj("ptx")?)?,
        sass: i.opt_obj("sass")?.map(listing).transpose()?,
        sass_unavailable: i.opt_str("sass_unavailable")?,
        resources: Resources {
            registers: u32_of("registers")?,
            barriers: u32_of("barriers")?,
            shared_bytes: r.opt("shared_bytes", Value::as_u64)?,
            stack_bytes: r.opt("stack_bytes", Value::as_u64)?,
            spill_store_bytes: r.opt("spill_store_bytes", Value::as_u64)?,
            spill_load_bytes: r.opt("spill_load_bytes", Value::as_u64)?,
            local_bytes: r.opt("local_bytes", Value::as_u64)?,
            constant_bytes: r.opt("constant_bytes", Value::as_u64)?,
        },
        warnings: i
            .list("warnings")?
            .iter()
            .map(warning)
            .collect::<Read<_>>()?,
        log: i.str("log")?.to_string(),
        nvrtc: i.str("nvrtc")?.to_string(),
        nvdisasm: i.opt_str("nvdisasm")?,
        options: strings("options")?,
        cubin_bytes: i.u64("cubin_bytes")? as usize,
        cached: i.bool("cached")?,
        nvrtc_ms: i.f64("nvrtc_ms")?,
    })
}
