//! The PTX and SASS panes: what the GPU runs, next to the CUDA it came from (as Compiler
//! Explorer shows it). Each pane has the resource summary (ptxas: registers, shared memory,
//! barriers, stack, spills) and NVRTC's warnings on top, then two columns: the CUDA with a
//! colour band per line that has code, and the listing with each instruction in the band of its
//! CUDA line. Hovering a line (or clicking it, which pins it and scrolls the other column to it)
//! highlights that CUDA line and all of its instructions, and the strip above names its
//! kernel-IR statement and the pass that produced it (the compiler's line map).
//!
//! The listings come from the runner service (`POST /api/inspect`: NVRTC and nvdisasm, no GPU
//! needed), asked once per program and sizes while one of these panes is shown. Without a
//! service the panes say what they need, and still show the CUDA with its line map from the
//! in-page compilation. The HTML is built as text (tested natively); colours are CSS variables
//! and classes (`.insp*` in style.css), so both themes work.

use crate::model::Compiled;
use crate::pipeline::esc;
use crate::runner::{self, ApiError, Settings};
use hopfuse::backend::codegen::lines::{CudaLine, LineMap};
use hopfuse_api::inspect::InspectBody;
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;
use wasm_bindgen::JsCast;

/// Which listing a pane shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asm {
    Ptx,
    Sass,
}

impl Asm {
    fn name(self) -> &'static str {
        match self {
            Asm::Ptx => "PTX",
            Asm::Sass => "SASS",
        }
    }
}

/// Colour bands (`.insp .b0` ... `.b7`).
const BANDS: usize = 8;
/// Quiet time after a change before the service is asked.
const DEBOUNCE_MS: u64 = 300;
/// NVRTC on a large kernel takes seconds; the service's own limit is 60 s.
const TIMEOUT_MS: u32 = 90_000;

// The answer of POST /api/inspect (docs/api.md): the service's own types, read by serde.
pub use hopfuse_api::inspect::{Inspection, Listing, Resources, Variant, Warning};

/// Where the panes' request is.
#[derive(Clone, Debug, PartialEq)]
pub enum Fetch {
    /// Not asked yet (no pane shown, or the program has errors).
    Idle,
    Loading,
    Done(Arc<Inspection>),
    /// Why there are no listings.
    Failed(String),
}

// ---------------------------------------------------------------------------------------------
// HTML

/// The kernel source the panes show: the service's (the variant it built) or the page's.
struct Source<'a> {
    cuda: &'a str,
    lines: &'a LineMap,
}

/// The band of every CUDA line that has instructions in `listing`: lines in order of first
/// appearance get bands 0, 1, 2, ... (mod [`BANDS`]), so neighbours differ.
fn bands(listing: &Listing) -> BTreeMap<u32, usize> {
    let mut out = BTreeMap::new();
    for l in listing.cuda_lines.iter().flatten() {
        let next = out.len() % BANDS;
        out.entry(*l).or_insert(next);
    }
    out
}

/// What the strip above the columns says about CUDA line `n`: its IR statement and pass, then
/// (after a newline) the CUDA line.
pub fn describe(cuda: &str, ir: &str, lines: &LineMap, n: u32) -> String {
    let text = cuda
        .lines()
        .nth((n as usize).saturating_sub(1))
        .unwrap_or("")
        .trim();
    let what = match lines.get(n as usize) {
        Some(CudaLine::Stmt { ir_line, pass, .. }) | Some(CudaLine::Binding { ir_line, pass }) => {
            let ir_text = ir.lines().nth(ir_line - 1).unwrap_or("").trim();
            format!(
                "IR line {ir_line}, from pass {}: {ir_text}",
                pass.as_deref().unwrap_or("?")
            )
        }
        Some(CudaLine::Prelude) => "a prelude helper".into(),
        Some(CudaLine::Signature) => "the kernel's signature".into(),
        Some(CudaLine::Setup) => "set-up at kernel entry".into(),
        None => String::new(),
    };
    format!("{what}\nCUDA line {n}: {text}")
}

/// The CUDA column: one row per line with its number, its band when it has instructions, and a
/// warning mark.
fn cuda_column(src: &Source, bands: &BTreeMap<u32, usize>, warnings: &[Warning]) -> String {
    let mut out = String::from("<div class=\"insp-col insp-cuda\">");
    for (i, text) in src.cuda.lines().enumerate() {
        let n = i as u32 + 1;
        let band = bands.get(&n).map(|b| format!(" b{b}")).unwrap_or_default();
        let warn = warnings
            .iter()
            .filter(|w| w.cuda_line == Some(n))
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>();
        let (wclass, title) = if warn.is_empty() {
            ("", String::new())
        } else {
            (" warn", format!(" title=\"{}\"", esc(&warn.join("\n"))))
        };
        let ir = src.lines.get(n as usize).and_then(|l| l.ir_line());
        let ir_attr = ir.map(|l| format!(" data-ir=\"{l}\"")).unwrap_or_default();
        let _ = write!(
            out,
            "<div class=\"l{band}{wclass}\" data-c=\"{n}\"{ir_attr}{title}><span class=\"n\">{n}</span>{}</div>",
            esc(text)
        );
    }
    out.push_str("</div>");
    out
}

/// A SASS instruction line without nvdisasm's column padding: `/*0370*/   @P6 BRA ...` with the
/// predicate in a narrow column, so the instruction fits a pane. Other lines are kept.
pub fn compact(line: &str) -> String {
    let t = line.trim_start();
    let Some((offset, rest)) = t.strip_prefix("/*").and_then(|r| r.split_once("*/")) else {
        return line.to_string();
    };
    let rest = rest.trim_start();
    let (pred, instr) = match rest.split_once(' ') {
        Some((p, i)) if p.starts_with('@') => (p, i.trim_start()),
        _ => ("", rest),
    };
    format!("/*{offset}*/ {pred:>5} {instr}")
}

/// The listing column: instructions in the band of their CUDA line.
fn asm_column(listing: &Listing, bands: &BTreeMap<u32, usize>) -> String {
    let mut out = String::from("<div class=\"insp-col insp-asm\">");
    for (i, text) in listing.text.lines().enumerate() {
        let text = compact(text);
        let text = text.as_str();
        match listing.cuda_lines.get(i).copied().flatten() {
            Some(c) => {
                let band = bands.get(&c).copied().unwrap_or(0);
                let inl = listing
                    .inlined
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|l| format!(" title=\"inlined from CUDA line {l}\""))
                    .unwrap_or_default();
                let _ = write!(
                    out,
                    "<div class=\"l b{band}\" data-c=\"{c}\"{inl}>{}</div>",
                    esc(text)
                );
            }
            None => {
                let _ = write!(out, "<div class=\"l\">{}</div>", esc(text));
            }
        }
    }
    out.push_str("</div>");
    out
}

/// The resource summary.
fn summary(ins: &Inspection) -> String {
    let r = &ins.resources;
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
    let spills = r.spill_store_bytes.unwrap_or(0) + r.spill_load_bytes.unwrap_or(0);
    format!(
        "<div class=\"insp-summary\" id=\"insp-resources\">\
         <span><b>{}</b> registers</span>\
         <span><b>{}</b> B static shared memory</span>\
         <span><b>{}</b> barriers</span>\
         <span><b>{}</b> B stack</span>\
         <span class=\"{}\"><b>{}</b> / <b>{}</b> B spilled (stores / loads)</span>\
         <span class=\"dim\">{} index, {}; NVRTC {}{}{}</span></div>",
        n(r.registers.map(u64::from)),
        n(r.shared_bytes),
        n(r.barriers.map(u64::from)),
        n(r.stack_bytes),
        if spills > 0 { "bad" } else { "" },
        n(r.spill_store_bytes),
        n(r.spill_load_bytes),
        runner::index_name(ins.variant.index_type),
        esc(&ins.variant.reason),
        esc(&ins.nvrtc),
        ins.nvdisasm
            .as_deref()
            .map(|v| format!(", nvdisasm {}", esc(v)))
            .unwrap_or_default(),
        if ins.cached { ", cached" } else { "" },
    )
}

fn warnings_list(ins: &Inspection) -> String {
    if ins.warnings.is_empty() {
        return String::new();
    }
    let mut out = String::from("<ul class=\"insp-warnings\" id=\"insp-warnings\">");
    for w in &ins.warnings {
        let at = w
            .cuda_line
            .map(|l| format!(" data-c=\"{l}\""))
            .unwrap_or_default();
        let _ = write!(out, "<li{at}>⚠ {}</li>", esc(&w.text));
    }
    out.push_str("</ul>");
    out
}

/// What the strip says while no line is lit.
const HINT: &str = "Hover or click a line: its CUDA line, its instructions and its kernel-IR \
                    statement light up.";

/// A pane with the service's listings.
pub fn html(ins: &Inspection, asm: Asm) -> String {
    let src = Source {
        cuda: &ins.cuda,
        lines: &ins.lines,
    };
    let listing = match asm {
        Asm::Ptx => Some(&ins.ptx),
        Asm::Sass => ins.sass.as_ref(),
    };
    let mut out = summary(ins);
    out.push_str(&warnings_list(ins));
    let empty = BTreeMap::new();
    let b = listing.map(bands).unwrap_or(empty);
    out.push_str("<div class=\"insp-cols\">");
    out.push_str(&cuda_column(&src, &b, &ins.warnings));
    match listing {
        Some(l) => out.push_str(&asm_column(l, &b)),
        None => {
            let _ = write!(
                out,
                "<div class=\"insp-col insp-asm insp-need\">No SASS: {}</div>",
                esc(ins.sass_unavailable.as_deref().unwrap_or("unknown reason"))
            );
        }
    }
    out.push_str("</div>");
    out
}

/// A pane without listings: why and what they need, and the page's CUDA with its line map.
pub fn html_without(c: Option<&Compiled>, asm: Asm, why: &str) -> String {
    let mut out = format!(
        "<div class=\"insp-need\" id=\"insp-need\">{}</div>",
        esc(&format!(
            "{} comes from a hopfuse runner service (it compiles with NVRTC and disassembles \
             with nvdisasm, no GPU needed; scripts/run.sh starts one). {why}",
            asm.name()
        ))
    );
    if let Some(c) = c {
        let src = Source {
            cuda: &c.cuda,
            lines: &c.lines,
        };
        let _ = write!(
            out,
            "<div class=\"insp-cols\">{}</div>",
            cuda_column(&src, &BTreeMap::new(), &[])
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The panes

/// The state both panes share: one request answers both.
#[derive(Clone, Copy)]
pub struct Inspector {
    fetch: RwSignal<Fetch>,
    /// The CUDA line lit up, and whether a click pinned it.
    lit: RwSignal<Option<u32>>,
    pinned: RwSignal<bool>,
    compiled: Signal<Option<Arc<Compiled>>>,
}

impl Inspector {
    /// Asks the service for the listings of `program` whenever it, its sizes or the runner
    /// settings change while `shown` (and the program compiles in the page: `ok`).
    pub fn new(
        program: Signal<String>,
        sizes: Signal<BTreeMap<String, i64>>,
        default_size: i64,
        compiled: Signal<Option<Arc<Compiled>>>,
        ok: Signal<bool>,
        settings: Signal<Settings>,
        shown: Signal<bool>,
    ) -> Inspector {
        let fetch = RwSignal::new(Fetch::Idle);
        let asked = StoredValue::new(String::new());
        let generation = StoredValue::new(0u64);
        Effect::new(move |_| {
            if !shown.get() || !ok.get() {
                return;
            }
            let Some(c) = compiled.get() else { return };
            let program = program.get();
            let sizes = sizes.with(|s| crate::model::sizes_of(&c.plan.symbols, s, default_size));
            let settings = settings.get();
            let body = InspectBody {
                program,
                sizes,
                index: None,
            };
            let key = format!(
                "{}\n{}\n{}",
                settings.base(),
                settings.token,
                serde_json::to_string(&body).unwrap_or_default()
            );
            if asked.with_value(|a| *a == key) {
                return;
            }
            asked.set_value(key);
            generation.update_value(|g| *g += 1);
            let mine = generation.get_value();
            fetch.set(Fetch::Loading);
            set_timeout(
                move || {
                    if generation.get_value() != mine {
                        return;
                    }
                    spawn_local(async move {
                        let answer = runner::request::<Inspection>(
                            &settings,
                            "POST",
                            "/api/inspect",
                            Some(&body),
                            TIMEOUT_MS,
                        )
                        .await;
                        if generation.get_value() != mine {
                            return;
                        }
                        fetch.set(match answer {
                            Ok(ins) => Fetch::Done(Arc::new(ins)),
                            Err(e) => Fetch::Failed(failure(&e, &settings)),
                        });
                    });
                },
                Duration::from_millis(DEBOUNCE_MS),
            );
        });
        Inspector {
            fetch,
            lit: RwSignal::new(None),
            pinned: RwSignal::new(false),
            compiled,
        }
    }
}

/// Why there are no listings, in words.
fn failure(e: &ApiError, settings: &Settings) -> String {
    match e {
        ApiError::Unreachable(why) => {
            format!("No service is reachable at {} ({why}).", settings.place())
        }
        ApiError::Http(503, msg) => format!("This service cannot build PTX and SASS: {msg}"),
        e => e.describe(settings),
    }
}

/// The CUDA line of the element under an event, if any.
fn line_of(target: Option<web_sys::EventTarget>) -> Option<(u32, web_sys::Element)> {
    let el = target?.dyn_into::<web_sys::Element>().ok()?;
    let row = el.closest("[data-c]").ok()??;
    let n = row.get_attribute("data-c")?.parse().ok()?;
    Some((n, row))
}

/// Scrolls the other column of the pane to the first row of CUDA line `n`.
fn reveal(row: &web_sys::Element, n: u32) {
    let Some(cols) = row.closest(".insp-cols").ok().flatten() else {
        return;
    };
    let in_cuda = row.closest(".insp-cuda").ok().flatten().is_some();
    let other = if in_cuda { ".insp-asm" } else { ".insp-cuda" };
    let Some(col) = cols.query_selector(other).ok().flatten() else {
        return;
    };
    let Some(target) = col
        .query_selector(&format!("[data-c=\"{n}\"]"))
        .ok()
        .flatten()
        .and_then(|t| t.dyn_into::<web_sys::HtmlElement>().ok())
    else {
        return;
    };
    let top = target.offset_top() - col.client_height() / 3;
    col.set_scroll_top(top.max(0));
}

/// One pane (PTX or SASS).
#[component]
pub fn InspectPane(inspector: Inspector, asm: Asm) -> impl IntoView {
    let Inspector {
        fetch,
        lit,
        pinned,
        compiled,
    } = inspector;
    let body = move || match fetch.get() {
        Fetch::Done(ins) => html(&ins, asm),
        Fetch::Loading => compiled.with(|c| {
            html_without(c.as_deref(), asm, "Asking the service…")
                .replace("class=\"insp-need\"", "class=\"insp-need loading\"")
        }),
        Fetch::Idle => compiled.with(|c| {
            html_without(
                c.as_deref(),
                asm,
                "The program has errors, or nothing was asked yet.",
            )
        }),
        Fetch::Failed(why) => compiled.with(|c| html_without(c.as_deref(), asm, &why)),
    };
    // The strip names the lit line's IR statement.
    let strip = move || {
        let n = lit.get()?;
        let text = match fetch.get() {
            Fetch::Done(ins) => describe(&ins.cuda, &ins.ir, &ins.lines, n),
            _ => compiled.with(|c| {
                c.as_ref().map(|c| {
                    let ir = c.passes.last().map(|p| p.ir.as_str()).unwrap_or("");
                    describe(&c.cuda, ir, &c.lines, n)
                })
            })?,
        };
        Some(text)
    };
    let style = move || {
        lit.get()
            .map(|n| format!(".insp [data-c=\"{n}\"] {{ background: var(--insp-lit) !important; box-shadow: inset 3px 0 var(--accent); }}"))
            .unwrap_or_default()
    };
    view! {
        <style>{style}</style>
        // Always there and of fixed height: a strip that came and went would move the lines
        // under the pointer.
        <div class="insp-lit" class:idle=move || lit.with(Option::is_none)>
            {move || {
                let text = strip().unwrap_or_else(|| HINT.to_string());
                let (ir, cuda) = text.split_once('\n').unwrap_or((text.as_str(), ""));
                let pin = if pinned.get() { "(pinned: click again to release) " } else { "" };
                view! {
                    <div class="insp-ir">{format!("{pin}{ir}")}</div>
                    <div class="insp-cu">{cuda.to_string()}</div>
                }
            }}
        </div>
        <div
            class="insp"
            inner_html=body
            on:mouseover=move |e: leptos::ev::MouseEvent| {
                if !pinned.get_untracked() {
                    if let Some((n, _)) = line_of(e.target()) {
                        lit.set(Some(n));
                    }
                }
            }
            on:mouseleave=move |_| {
                if !pinned.get_untracked() {
                    lit.set(None);
                }
            }
            on:click=move |e: leptos::ev::MouseEvent| {
                match line_of(e.target()) {
                    Some((n, row)) if !(pinned.get_untracked() && lit.get_untracked() == Some(n)) => {
                        lit.set(Some(n));
                        pinned.set(true);
                        reveal(&row, n);
                    }
                    _ => {
                        pinned.set(false);
                        lit.set(None);
                    }
                }
            }
        ></div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service's answer, written from the runner's types by runner/tests/api_fixtures.rs.
    const FIXTURE: &str = include_str!("../tests/fixtures/inspect-exp-2d.json");

    #[test]
    fn the_services_answer_is_read_and_drawn_in_bands() {
        let mut ins: Inspection = runner::read_json(FIXTURE).expect("the fixture reads");
        // What the panes show of it.
        assert_eq!(ins.kernel, "exp_2d_kernel");
        assert!(ins.ptx.text.contains(".entry exp_2d_kernel"));
        assert_eq!(ins.ptx.cuda_lines.len(), ins.ptx.text.lines().count());
        assert!(ins.resources.registers.is_some() && ins.cubin_bytes > 0);
        // A field the service renamed is an error that names it.
        let renamed = FIXTURE.replacen("\"cuda_lines\"", "\"cuda_line\"", 1);
        assert_ne!(renamed, FIXTURE);
        let e = runner::read_json::<Inspection>(&renamed).unwrap_err();
        assert!(e.to_string().contains("missing field `cuda_lines`"), "{e}");
        // The line map reads back as the compiler writes it.
        let src = crate::examples::source(&crate::examples::find("tma/exp_2d").unwrap());
        assert_eq!(
            ins.lines,
            crate::model::compile(src, &Default::default())
                .unwrap()
                .lines
        );
        assert!(runner::read_json::<Inspection>(r#"{"kernel": "k"}"#).is_err());
        assert!(ins.warnings.is_empty(), "exp_2d builds without warnings");
        let warned = ins.cuda.lines().count() as u32 - 2;
        ins.warnings.push(Warning {
            text: format!("exp_2d_kernel.cu({warned}): warning #177-D: a test warning"),
            cuda_line: Some(warned),
        });
        let h = html(&ins, Asm::Sass);
        // The summary, the warning, one row per CUDA line and per SASS line.
        let regs = ins.resources.registers.unwrap();
        assert!(h.contains(&format!("<b>{regs}</b> registers")));
        assert!(h.contains("⚠ "), "the warning is listed");
        let sass = ins.sass.as_ref().unwrap();
        assert_eq!(
            h.matches("<div class=\"l").count(),
            ins.cuda.lines().count() + sass.text.lines().count()
        );
        // The copy instruction and its CUDA line share a band and a line number.
        let copy = sass
            .text
            .lines()
            .position(|l| l.contains("UTMALDG"))
            .unwrap();
        let c = sass.cuda_lines[copy].unwrap();
        let b = bands(sass)[&c];
        assert!(h.contains(&format!("<div class=\"l b{b}\" data-c=\"{c}\"")));
        let cuda_row = format!("class=\"l b{b}\" data-c=\"{c}\" data-ir=");
        assert!(h.contains(&cuda_row), "{cuda_row}");
        // The warned CUDA line is marked.
        let w = ins.warnings[0].cuda_line.unwrap();
        assert!(h.contains(&format!("warn\" data-c=\"{w}\"")));
        // PTX: the same CUDA column, PTX rows.
        let p = html(&ins, Asm::Ptx);
        assert!(p.contains("cp.async.bulk.tensor"));
        // The strip: CUDA line, IR statement and pass.
        let d = describe(&ins.cuda, &ins.ir, &ins.lines, c);
        assert!(d.contains("hf_tma_load_2d("), "{d}");
        assert!(
            d.starts_with("IR line ") && d.contains(&format!("\nCUDA line {c}: ")),
            "{d}"
        );
        assert!(d.contains("from pass circular_buffer"), "{d}");
        assert!(d.contains("<- tma_load_2d"), "{d}");
    }

    #[test]
    fn without_a_service_the_pane_says_what_it_needs_and_keeps_the_line_map() {
        let src = crate::examples::source(&crate::examples::find("tma/exp_2d").unwrap());
        let c = crate::model::compile(src, &Default::default()).unwrap();
        let h = html_without(Some(&c), Asm::Sass, "No service is reachable.");
        assert!(h.contains("SASS comes from a hopfuse runner service"));
        assert!(h.contains("No service is reachable."));
        assert_eq!(h.matches("<div class=\"l").count(), c.cuda.lines().count());
        let n = c
            .cuda
            .lines()
            .position(|l| l.contains("__syncthreads();"))
            .unwrap() as u32
            + 1;
        let ir = &c.passes.last().unwrap().ir;
        assert!(describe(&c.cuda, ir, &c.lines, n).contains("IR line"));
        assert!(html_without(None, Asm::Ptx, "x").contains("PTX comes from"));
    }

    #[test]
    fn sass_lines_lose_their_padding_and_keep_their_predicate() {
        assert_eq!(
            compact("        /*0370*/                   @P6 BRA `(.L_x_2) ;"),
            "/*0370*/   @P6 BRA `(.L_x_2) ;"
        );
        assert_eq!(
            compact("        /*0040*/                   LEA R7, R7, R0, 0x7 ;"),
            "/*0040*/       LEA R7, R7, R0, 0x7 ;"
        );
        assert_eq!(compact(".L_x_0:"), ".L_x_0:");
        assert_eq!(
            compact("\tld.param.u64 \t%rd1, [p];"),
            "\tld.param.u64 \t%rd1, [p];"
        );
    }

    #[test]
    fn bands_follow_first_appearance() {
        let l = Listing {
            text: "a\nb\nc\nd\n".into(),
            cuda_lines: vec![Some(9), None, Some(3), Some(9)],
            inlined: vec![],
            no_source_line: 0,
        };
        let b = bands(&l);
        assert_eq!((b[&9], b[&3]), (0, 1));
    }
}
