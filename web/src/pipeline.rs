//! The Pipeline pane's diagram: the compiler's [`PipelineView`] drawn as inline SVG, one per
//! circular buffer. A column per slot, a row per role with the slots' row between the roles that
//! issue loads (above) and those that only wait (below): issue arrows (load into the slot,
//! `expect_tx` bytes), wait arrows (the full barrier, its parity) and the release back to the
//! producer. Tensor cores: a role that runs wgmma gets a row per warp group, whose box in each
//! slot is its wait, the wgmmas of one commit group on that slot's operands, the group's wait
//! and the release; a last column holds each warp group's accumulator registers (`(+)=` from
//! the slots), and the epilogue that reads them is said under the release. A staged epilogue
//! (`stmatrix` into a shared cache, TMA stores) is a column of its own after the accumulators,
//! and the footers say its path, where the stores are waited on, and the producer's loop
//! against the consumers' loops; how the consumer groups take turns, and what runs while each
//! product is in flight (`pipeline/overlap.rs`). Built as text, so it
//! is tested natively; colours are the page's CSS variables (`.pl-*` in style.css), so it
//! follows the light and dark themes.

use hopfuse::backend::pipeline_view::{
    Level, LoadKind, Major, Mma, PhaseKind, Pipeline, PipelineView, Release, StagedEpilogue,
    StoreWaitAt,
};
use std::fmt::Write;

mod overlap;
mod table;
pub use table::*;

/// What the pane says for a kernel without pipelines.
pub const NO_PIPELINE: &str = "no pipeline: this kernel has no TMA / circular-buffered loads";

/// Narrowest box; boxes widen to their longest line.
const MIN_BOX_W: i64 = 112;
/// A slot column is its box and room for the release arrow and the arrow labels.
const COL_PAD: i64 = 28;
/// The column headers.
const HEAD_H: i64 = 66;
/// Between a row's boxes and the next row's caption (the arrows and their labels).
const GAP: i64 = 50;
const LINE: i64 = 15;
/// Between the last slot column and the accumulator column (room for the `(+)=` arrow).
const ACC_GAP: i64 = 44;

/// Escapes text for SVG (conditions hold `<` and `&&`).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// `<text>` with one `<tspan>` per line.
fn text(out: &mut String, x: i64, y: i64, class: &str, anchor: &str, lines: &[String]) {
    let _ = write!(
        out,
        r#"<text x="{x}" y="{y}" class="{class}" text-anchor="{anchor}">"#
    );
    for (i, l) in lines.iter().enumerate() {
        let dy = if i == 0 { 0 } else { LINE };
        let _ = write!(out, r#"<tspan x="{x}" dy="{dy}">{}</tspan>"#, esc(l));
    }
    out.push_str("</text>");
}

/// A box `w` wide with a bold first line and dim further lines, centred at `cx`.
fn boxed(out: &mut String, (cx, w): (i64, i64), y: i64, h: i64, class: &str, lines: &[String]) {
    let x = cx - w / 2;
    let _ = write!(
        out,
        r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" class="{class}"/>"#
    );
    let top = y + (h - LINE * lines.len() as i64) / 2 + 11;
    if let Some((first, rest)) = lines.split_first() {
        text(
            out,
            cx,
            top,
            "pl-strong",
            "middle",
            std::slice::from_ref(first),
        );
        if !rest.is_empty() {
            text(out, cx, top + LINE, "pl-small", "middle", rest);
        }
    }
}

/// A column's heading centred at `cx`: a bold title, then dim lines.
fn column_head(out: &mut String, cx: i64, title: &str, lines: &[String]) {
    text(out, cx, 16, "pl-strong", "middle", &[title.to_string()]);
    text(out, cx, 16 + LINE, "pl-small", "middle", lines);
}

/// A vertical arrow from `y0` to `y1` at `x` with a label on its right, at its top (the next
/// row's caption crosses its lower part).
fn arrow(out: &mut String, x: i64, y0: i64, y1: i64, marker: &str, label: &[String]) {
    let _ = write!(
        out,
        r#"<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" class="pl-arrow" marker-end="url(#{marker})"/>"#
    );
    text(out, x + 6, y0 + 14, "pl-small", "start", label);
}

/// A horizontal arrow from `x0` to `x1` at `y`, its label above its middle.
fn h_arrow(out: &mut String, x0: i64, x1: i64, y: i64, marker: &str, label: &str) {
    let _ = write!(
        out,
        r#"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" class="pl-arrow" marker-end="url(#{marker})"/>"#,
        x1 - 2
    );
    text(
        out,
        (x0 + x1) / 2,
        y - 5,
        "pl-small",
        "middle",
        &[label.into()],
    );
}

/// A caption across the diagram: a bold name, then dim details.
fn caption(out: &mut String, y: i64, name: &str, detail: &str, class: &str) {
    let _ = write!(
        out,
        r#"<text x="6" y="{y}" class="pl-caption"><tspan class="pl-strong">{}</tspan><tspan dx="8" class="{class}">{}</tspan></text>"#,
        esc(name),
        esc(detail)
    );
}

/// A row of the diagram under the slots: a role that waits, or one warp group of a role that
/// runs wgmma (`wg`: its number when the role has several).
#[derive(Clone, Copy, PartialEq)]
struct Lane {
    role: usize,
    wg: Option<i64>,
}

/// The diagram of pipeline `index` of `view`: a column per slot; rows (each under a caption)
/// for the roles that issue loads, the slots, and the roles that only wait (a row per warp
/// group for those that run wgmma, with their accumulators in a last column); then the release
/// and the epilogue.
pub fn svg(view: &PipelineView, index: usize) -> String {
    let d = Diagram::new(view, index);
    let p = d.p;
    let marker = format!("pl-head-{index}");
    let footers = d.footers(index);
    let st_lines = d.staged_lines(index);
    let l = layout(&d, &footers, &st_lines);
    let (width, height) = (l.width, l.height);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="pl-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="{}">"#,
        esc(&summary(p))
    );
    let _ = write!(
        out,
        r#"<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="pl-head"/></marker></defs>"#
    );
    for k in 0..d.stages {
        draw_slot(&mut out, &d, &l, k, &marker);
    }
    draw_accumulators(&mut out, &d, &l, &st_lines, &marker);
    // The captions last: their halo hides the arrows that cross them.
    for ((name, detail), (cy, ..)) in l.captions.iter().zip(&l.rows) {
        caption(&mut out, *cy, name, detail, "pl-small");
    }
    for (i, (name, detail, class)) in footers.iter().enumerate() {
        caption(&mut out, l.footer + 20 * i as i64, name, detail, class);
    }
    out.push_str("</svg>");
    out
}

/// What the diagram of one pipeline shows: its roles' rows and its boxes' lines.
struct Diagram<'a> {
    view: &'a PipelineView,
    p: &'a Pipeline,
    stages: i64,
    /// The slots' buffers, comma-separated.
    buffers: String,
    /// The products that read the pipeline's slots.
    mmas: Vec<&'a Mma>,
    /// The roles that issue loads (rows above the slots).
    issuers: Vec<usize>,
    /// The rows under the slots.
    lanes: Vec<Lane>,
}

impl<'a> Diagram<'a> {
    fn new(view: &'a PipelineView, index: usize) -> Diagram<'a> {
        let p = &view.pipelines[index];
        let stages = p.stages.max(1);
        let buffers = p.buffers.join(", ");
        let mmas: Vec<&Mma> = view
            .mmas
            .iter()
            .filter(|m| pipeline_of(m) == Some(index))
            .collect();
        let mut issuers: Vec<usize> = Vec::new();
        let mut lanes: Vec<Lane> = Vec::new();
        for l in &p.loads {
            if !issuers.contains(&l.role) {
                issuers.push(l.role);
            }
        }
        let waiting = p.waits.iter().map(|w| w.role);
        for r in waiting.chain(mmas.iter().map(|m| m.role)) {
            if issuers.contains(&r) || lanes.iter().any(|l| l.role == r) {
                continue;
            }
            match view.roles[r].warp_groups.filter(|&n| n > 1) {
                Some(n) if mmas.iter().any(|m| m.role == r) => {
                    lanes.extend((0..n).map(|wg| Lane {
                        role: r,
                        wg: Some(wg),
                    }));
                }
                _ => lanes.push(Lane { role: r, wg: None }),
            }
        }
        Diagram {
            view,
            p,
            stages,
            buffers,
            mmas,
            issuers,
            lanes,
        }
    }

    /// What a role does in slot `k`, as the lines of its box.
    fn role_lines(&self, lane: Lane, k: i64) -> Vec<String> {
        let (p, mmas, buffers) = (self.p, &self.mmas, &self.buffers);
        let r = lane.role;
        let mut lines = Vec::new();
        for l in p.loads.iter().filter(|l| l.role == r) {
            lines.push(format!("load {} → {}[{k}]", l.tensor, l.buffer));
            lines.push(match l.kind {
                LoadKind::Tile => format!(
                    "TMA {}-D · {}{}{}",
                    l.rank,
                    boxes(l.boxes),
                    crate::model::bytes(l.bytes as f64),
                    l.multicast
                        .map(|n| format!(" slice, multicast to {n} CTAs"))
                        .unwrap_or_default()
                ),
                LoadKind::Bulk => format!("bulk · {}", crate::model::bytes(l.bytes as f64)),
            });
        }
        for w in p.waits.iter().filter(|w| w.role == r) {
            lines.push(format!("wait {}[{k}]", w.barrier));
        }
        let mut mma = false;
        for m in mmas.iter().filter(|m| m.role == r) {
            mma = true;
            let (rows, cols) = lane.wg.map(|wg| wg_part(m, wg)).unwrap_or_default();
            lines.push(mma_issue(m, false));
            for (name, o, part) in [("A", &m.a, rows), ("B", &m.b, cols)] {
                let part = part.map(|t| format!(" {t}")).unwrap_or_default();
                lines.push(format!(
                    "{name} {}[{k}]{part} · {}",
                    o.buffer,
                    major(o.major)
                ));
            }
            lines.push(match m.wait_group {
                Some(n) => format!("commit · wait_group {n}"),
                None => "commit".into(),
            });
            if let Some(rel) = &m.release {
                lines.push(format!("arrive {}[{k}]", rel.barrier));
            }
        }
        if !mma && p.waits.iter().any(|w| w.role == r) {
            lines.push(format!("read {buffers}[{k}]"));
        }
        lines
    }

    /// A warp group's accumulators (the last column), as the lines of its box.
    fn acc_lines(&self, lane: Lane) -> Vec<String> {
        let mmas = &self.mmas;
        let mut lines = Vec::new();
        for m in mmas.iter().filter(|m| m.role == lane.role) {
            let a = &m.accumulator;
            let n = a.allocated.unwrap_or(a.registers);
            lines.push(format!("{}[0..{}]", a.buffer, n - 1));
            lines.push(format!("{} × {} per thread", a.registers, a.dtype));
            lines.push(format!("{} × {} tile", m.m, m.n));
            if let Some(f) = &a.started {
                lines.push(format!("scale-d: {f}"));
            }
        }
        lines
    }

    /// A slot's box: its buffers and barriers.
    fn slot_lines(&self, k: i64) -> Vec<String> {
        let (p, buffers) = (self.p, &self.buffers);
        let mut l = vec![
            format!("{buffers}[{k}]"),
            format!("{}[{k}]", p.full_barrier),
        ];
        if let Some(e) = &p.empty_barrier {
            l.push(format!("{e}[{k}]"));
        }
        l
    }

    /// A row's caption: the role (or one of its warp groups) and its threads, registers, parity.
    fn role_caption(&self, lane: Lane) -> (String, String) {
        let (view, p, mmas) = (self.view, self.p, &self.mmas);
        let role = &view.roles[lane.role];
        let mut detail = role.threads.clone();
        let mut name = role.name.clone();
        if let Some(wg) = lane.wg {
            // One warp group of the role: its thread index, then the role's threads.
            name = format!("consumer warp group {wg}");
            let at = mmas
                .iter()
                .filter(|m| m.role == lane.role)
                .find_map(|m| wg_condition(m, wg))
                .unwrap_or_else(|| format!("warp group {wg}"));
            detail = format!("{at}, 128 of {}", role.threads);
        }
        if let Some(n) = role.registers {
            let _ = write!(detail, " · {n} registers");
        }
        for w in p.waits.iter().filter(|w| w.role == lane.role) {
            let _ = write!(detail, " · wait parity {}", w.parity);
        }
        (name, detail)
    }

    /// The shared-memory row's caption: the slots' size and barriers.
    fn slot_detail(&self) -> String {
        let (p, buffers, stages) = (self.p, &self.buffers, self.stages);
        let mut slot_detail = format!(
            "{buffers}: {stages} × {} · full barriers {}",
            crate::model::bytes(p.stage_bytes as f64),
            p.full_barrier
        );
        if let Some(e) = &p.empty_barrier {
            let _ = write!(slot_detail, " · empty barriers {e}");
        }
        slot_detail
    }

    /// The captions under the diagram: the release, the epilogue, the staged stores.
    fn footers(&self, index: usize) -> Vec<(String, String, &'static str)> {
        let (view, p, mmas, stages) = (self.view, self.p, &self.mmas, self.stages);
        let refill = p
            .loop_var
            .as_ref()
            .map(|v| format!(": refill with {v} + {stages}"))
            .unwrap_or_default();
        let (release, release_class) = match p.release {
            Release::SyncThreads => (
                format!("__syncthreads() after the reads{refill}"),
                "pl-small",
            ),
            Release::EmptyBarrier => (
                format!(
                    "the producer waits on {}[slot]{refill}",
                    p.empty_barrier.as_deref().unwrap_or("the empty barrier")
                ),
                "pl-small",
            ),
            Release::NotReused => ("slots are not refilled".to_string(), "pl-small"),
            Release::NotFound => (
                "none found: slots are refilled with no barrier after the reads".to_string(),
                "pl-warn",
            ),
        };
        // After the K loop: what reads the accumulators.
        let epilogue: Vec<String> = mmas
            .iter()
            .filter_map(|m| {
                let e = m.epilogue.as_ref()?;
                let to = if e.outputs.is_empty() {
                    String::new()
                } else {
                    format!(" → {}", e.outputs.join(", "))
                };
                Some(format!(
                    "after the loop, for {} in {}: the {} registers of {}{to}",
                    e.var, e.extent, m.accumulator.registers, m.accumulator.buffer
                ))
            })
            .collect();
        let mut footers = vec![("release".to_string(), release, release_class)];
        if !epilogue.is_empty() {
            footers.push(("epilogue".into(), epilogue.join("; "), "pl-small"));
        }
        // The consumer groups' turns (once) and what overlaps each product of the diagram.
        if let Some(t) = mmas.first().and_then(|m| overlap::turns_text(view, m)) {
            footers.push(("turns".into(), t, "pl-small"));
        }
        for t in mmas.iter().filter_map(|m| overlap::in_flight_text(view, m)) {
            footers.push(("in flight".into(), t, "pl-small"));
        }
        footers.extend(
            staged_rows(view, index)
                .into_iter()
                .map(|(a, b)| (a.to_string(), b, "pl-small")),
        );
        footers
    }

    /// The staged cache's box (a column after the accumulators, fed by each warp group's):
    /// empty without one.
    fn staged_lines(&self, index: usize) -> Vec<String> {
        let (view, lanes) = (self.view, &self.lanes);
        // The staged cache: a column after the accumulators, fed by each warp group's.
        let staged = staged_of(view, index).filter(|_| !lanes.is_empty());
        let st_lines: Vec<String> = staged
            .map(|s| {
                let mut l = vec![
                    format!("{} · shared", s.cache),
                    format!("{}stmatrix.x4 / warp", count(s.stmatrix)),
                    format!("{}TMA store → {}", count(s.boxes), s.tensor),
                ];
                if s.waits.iter().any(|w| w.at == StoreWaitAt::BeforeRewrite) {
                    l.push("read-wait: next tile".into());
                }
                l
            })
            .unwrap_or_default();
        st_lines
    }
}

/// Where the diagram's parts go.
struct Layout {
    box_w: i64,
    col_w: i64,
    /// The accumulators' column (0: none) and the rows that have accumulators.
    acc_w: i64,
    acc_rows: Vec<usize>,
    st_w: i64,
    captions: Vec<(String, String)>,
    /// Each row: its caption's y, its boxes' y and height.
    rows: Vec<(i64, i64, i64)>,
    footer: i64,
    width: i64,
    height: i64,
    x_start: i64,
    /// The slots' row (after the issuers').
    slot_row: usize,
}

/// The columns' widths (each as wide as its longest box line, about 7 px a character, plus room
/// for the arrows) and the rows' heights.
fn layout(d: &Diagram, footers: &[(String, String, &str)], st_lines: &[String]) -> Layout {
    let (stages, issuers, lanes) = (d.stages, &d.issuers, &d.lanes);
    let slot_detail = d.slot_detail();
    // Every row: (caption, its y, the boxes' y and height). Each column is as wide as its
    // longest box line (about 7 px a character) plus room for the arrows.
    let char_w = |lines: &[String]| {
        lines
            .iter()
            .map(|l| l.chars().count() as i64)
            .max()
            .unwrap_or(0)
    };
    let longest = (0..stages)
        .map(|k| {
            let mut l = d.slot_lines(k);
            for &r in issuers {
                l.extend(d.role_lines(Lane { role: r, wg: None }, k));
            }
            for &lane in lanes {
                l.extend(d.role_lines(lane, k));
            }
            char_w(&l)
        })
        .max()
        .unwrap_or(0);
    let box_w = (longest * 7 + 14).max(MIN_BOX_W);
    let col_w = box_w + COL_PAD;
    let acc_rows: Vec<usize> = (0..lanes.len())
        .filter(|&i| !d.acc_lines(lanes[i]).is_empty())
        .collect();
    let acc_w = if acc_rows.is_empty() {
        0
    } else {
        let lines: Vec<String> = lanes.iter().flat_map(|&l| d.acc_lines(l)).collect();
        (char_w(&lines) * 7 + 14).max(MIN_BOX_W)
    };
    let acc_col = if acc_w > 0 { ACC_GAP + acc_w + 14 } else { 0 };
    let st_w = (char_w(st_lines) * 7 + 14).max(MIN_BOX_W);
    let acc_col = acc_col
        + if st_lines.is_empty() {
            0
        } else {
            ACC_GAP + st_w
        };
    let mut captions: Vec<(String, String)> = Vec::new();
    let mut heights: Vec<i64> = Vec::new();
    for &r in issuers {
        captions.push(d.role_caption(Lane { role: r, wg: None }));
        heights.push(d.role_lines(Lane { role: r, wg: None }, 0).len() as i64);
    }
    captions.push(("shared memory".into(), slot_detail));
    heights.push(d.slot_lines(0).len() as i64);
    for &lane in lanes {
        captions.push(d.role_caption(lane));
        heights.push((d.role_lines(lane, 0).len().max(d.acc_lines(lane).len())) as i64);
    }
    let mut rows: Vec<(i64, i64, i64)> = Vec::new();
    let mut y = HEAD_H;
    for n in &heights {
        let h = n * LINE + 14;
        rows.push((y, y + 8, h));
        y += 8 + h + GAP;
    }
    let footer = y - GAP + 22;
    let caption_w = captions
        .iter()
        .cloned()
        .chain(footers.iter().map(|(a, b, _)| (a.clone(), b.clone())))
        .map(|(a, b)| (a.chars().count() + b.chars().count()) as i64 * 7 + 30)
        .max()
        .unwrap_or(0);
    let width = (stages * col_w + acc_col + 10).max(caption_w);
    let x_start = (width - stages * col_w - acc_col) / 2;
    let height = footer + 20 * footers.len() as i64 - 10;
    let slot_row = issuers.len();
    Layout {
        box_w,
        col_w,
        acc_w,
        acc_rows,
        st_w,
        captions,
        rows,
        footer,
        width,
        height,
        x_start,
        slot_row,
    }
}

/// Slot `k`'s column: its head, the issuers' boxes, the slot, the waiting rows, and the issue,
/// full and release arrows.
fn draw_slot(out: &mut String, d: &Diagram, l: &Layout, k: i64, marker: &str) {
    let (p, mmas, issuers, lanes, stages) = (d.p, &d.mmas, &d.issuers, &d.lanes, d.stages);
    let Layout {
        box_w,
        col_w,
        ref rows,
        footer,
        x_start,
        slot_row,
        ..
    } = *l;
    let x0 = x_start + k * col_w;
    let cx = x0 + col_w / 2;
    let left = cx - box_w / 2;
    let right = cx + box_w / 2;
    if k > 0 {
        let _ = write!(
            out,
            r#"<line x1="{x0}" y1="4" x2="{x0}" y2="{}" class="pl-grid"/>"#,
            footer - 18
        );
    }
    let first = match p.prefetch {
        Some(n) if k < n => "first: prologue",
        Some(_) if p.phases.iter().any(|ph| ph.kind == PhaseKind::Main) => "first: main loop",
        _ => "",
    };
    let iter = match (&p.loop_var, stages) {
        (_, 1) => "every iteration".to_string(),
        (Some(v), s) => format!("{v} % {s} == {k}"),
        (None, _) => String::new(),
    };
    column_head(out, cx, &format!("slot {k}"), &[iter, first.to_string()]);
    for (i, &r) in issuers.iter().enumerate() {
        let (_, by, bh) = rows[i];
        boxed(
            out,
            (cx, box_w),
            by,
            bh,
            "pl-box pl-issue",
            &d.role_lines(Lane { role: r, wg: None }, k),
        );
    }
    let (_, sy, sh) = rows[slot_row];
    let _ = write!(out, r#"<g class="pl-slot" data-slot="{k}">"#);
    boxed(out, (cx, box_w), sy, sh, "pl-slot-box", &d.slot_lines(k));
    out.push_str("</g>");
    for (i, &lane) in lanes.iter().enumerate() {
        let (_, by, bh) = rows[slot_row + 1 + i];
        let mma = mmas.iter().any(|m| m.role == lane.role);
        let class = if mma {
            "pl-box pl-wait pl-mma"
        } else {
            "pl-box pl-wait"
        };
        boxed(out, (cx, box_w), by, bh, class, &d.role_lines(lane, k));
        // The slot's full barrier releases every warp group: into the first row from
        // above, into the others around the column's right side.
        if i > 0 && lane.wg.is_some_and(|wg| wg > 0) {
            let _ = write!(
                out,
                r#"<path d="M{right} {} H{} V{} H{}" class="pl-arrow" marker-end="url(#{marker})"/>"#,
                sy + sh / 2,
                right + 9,
                by + bh / 2,
                right + 2
            );
        }
    }
    // Issue: from the issuing row just above the slots; wait: into the first waiting row.
    if let Some(&r) = issuers.last() {
        let (_, by, bh) = rows[slot_row - 1];
        // Each arrival's bytes once (one arrival may announce several loads).
        let mut arrivals = Vec::new();
        let tx: i64 = p
            .loads
            .iter()
            .filter(|l| l.role == r)
            .filter(|l| match l.arrival {
                Some(a) if arrivals.contains(&a) => false,
                Some(a) => {
                    arrivals.push(a);
                    true
                }
                None => true,
            })
            .filter_map(|l| l.expect_tx)
            .sum();
        arrow(
            out,
            left + 18,
            by + bh,
            sy - 2,
            marker,
            &["issue".into(), format!("expect_tx {tx} B")],
        );
    }
    if !lanes.is_empty() {
        let (_, by, _) = rows[slot_row + 1];
        arrow(
            out,
            left + 18,
            sy + sh,
            by - 2,
            marker,
            &["full".into(), "(phase done)".into()],
        );
    }
    // Release: from the last row back up to the issuing row.
    let refills = matches!(p.release, Release::SyncThreads | Release::EmptyBarrier);
    if refills && !issuers.is_empty() && rows.len() > slot_row + 1 {
        let (_, ty, th) = rows[0];
        let (_, by, bh) = rows[rows.len() - 1];
        let _ = write!(
            out,
            r#"<path d="M{} {} H{} V{} H{}" class="pl-arrow pl-release" marker-end="url(#{marker})"/>"#,
            left,
            by + bh / 2,
            left - 9,
            ty + th / 2,
            left - 2
        );
    }
}

/// The accumulators: a column of register boxes, one per warp group, fed by the last slot;
/// then the staged cache over every warp group's row.
fn draw_accumulators(out: &mut String, d: &Diagram, l: &Layout, st_lines: &[String], marker: &str) {
    let (stages, lanes) = (d.stages, &d.lanes);
    let Layout {
        col_w,
        acc_w,
        ref acc_rows,
        st_w,
        ref rows,
        footer,
        x_start,
        slot_row,
        ..
    } = *l;
    if acc_w == 0 {
        return;
    }
    let x0 = x_start + stages * col_w;
    let cx = x0 + ACC_GAP + acc_w / 2;
    let _ = write!(
        out,
        r#"<line x1="{x0}" y1="4" x2="{x0}" y2="{}" class="pl-grid"/>"#,
        footer - 18
    );
    column_head(
        out,
        cx,
        "accumulator",
        &["registers".into(), "every slot adds in".into()],
    );
    let from = x0 - COL_PAD / 2;
    for &i in acc_rows.iter() {
        let (_, by, bh) = rows[slot_row + 1 + i];
        let _ = write!(out, r#"<g class="pl-acc" data-lane="{i}">"#);
        boxed(
            out,
            (cx, acc_w),
            by,
            bh,
            "pl-box pl-acc-box",
            &d.acc_lines(lanes[i]),
        );
        out.push_str("</g>");
        // Low in the box: clear of the full barrier's path into the next warp group.
        let mid = by + bh - 12;
        h_arrow(out, from, cx - acc_w / 2, mid, marker, "(+)=");
        if !st_lines.is_empty() {
            h_arrow(
                out,
                cx + acc_w / 2,
                cx + acc_w / 2 + ACC_GAP,
                mid,
                marker,
                "st",
            );
        }
    }
    // The staged cache, over every warp group's row.
    if let (Some(&first), Some(&last), false) =
        (acc_rows.first(), acc_rows.last(), st_lines.is_empty())
    {
        let sx = cx + acc_w / 2 + ACC_GAP + st_w / 2;
        let (_, top, _) = rows[slot_row + 1 + first];
        let (_, by, bh) = rows[slot_row + 1 + last];
        column_head(
            out,
            sx,
            "store",
            &["shared cache".into(), "per tile".into()],
        );
        out.push_str(r#"<g class="pl-staged">"#);
        // Its lines in the first row: the next row's caption crosses the box lower down.
        boxed(out, (sx, st_w), top, by + bh - top, "pl-slot-box", &[]);
        let (first, rest) = st_lines.split_at(1);
        text(out, sx, top + 20, "pl-strong", "middle", first);
        text(out, sx, top + 20 + LINE, "pl-small", "middle", rest);
        out.push_str("</g>");
    }
}

/// "2 × " before a box's size when a stage holds several of it side by side.
fn boxes(n: i64) -> String {
    if n > 1 {
        format!("{n} × ")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests;
