//! The Pipeline pane's diagram: the compiler's [`PipelineView`] drawn as inline SVG, one per
//! circular buffer. A column per slot, a row per role with the slots' row between the roles that
//! issue loads (above) and those that only wait (below): issue arrows (load into the slot,
//! `expect_tx` bytes), wait arrows (the full barrier, its parity) and the release back to the
//! producer. Built as text, so it is tested natively; colours are the page's CSS variables
//! (`.pl-*` in style.css), so it follows the light and dark themes.

use hopfuse::pipeline_view::{LoadKind, PhaseKind, Pipeline, PipelineView, Release};
use std::fmt::Write;

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

fn phase_name(k: PhaseKind) -> &'static str {
    match k {
        PhaseKind::Prologue => "prologue",
        PhaseKind::Main => "main",
        PhaseKind::Epilogue => "epilogue",
        PhaseKind::Once => "once",
        PhaseKind::Produce => "producer loop",
        PhaseKind::Consume => "consumer loop",
    }
}

/// One line about a pipeline: what goes where, how many stages, the loops.
pub fn summary(p: &Pipeline) -> String {
    let mut t = format!(
        "{} → {}: {} stage{} of {}",
        p.tensors.join(", "),
        p.buffers.join(", "),
        p.stages,
        if p.stages == 1 { "" } else { "s" },
        crate::model::bytes(p.stage_bytes as f64)
    );
    if let Some(n) = p.prefetch.filter(|&n| n > 0) {
        let _ = write!(t, ", {n} loaded ahead");
    }
    if let Some(v) = &p.loop_var {
        let _ = write!(t, ", loop {v}");
    }
    let phases: Vec<String> = p
        .phases
        .iter()
        .map(|ph| match (&ph.var, &ph.extent) {
            (Some(v), Some(e)) => format!("{} (for {v} in {e})", phase_name(ph.kind)),
            _ => phase_name(ph.kind).to_string(),
        })
        .collect();
    if !phases.is_empty() {
        let _ = write!(t, ": {}", phases.join(" → "));
    }
    t
}

/// How a slot is given back, in words.
pub fn release_text(p: &Pipeline) -> String {
    match p.release {
        Release::SyncThreads => {
            "__syncthreads() after the reads of each main-loop iteration; then the producer refills the slot".into()
        }
        Release::EmptyBarrier => format!(
            "the producer waits on {} before it refills a slot",
            p.empty_barrier.as_deref().unwrap_or("the empty barrier")
        ),
        Release::NotReused => "slots are not refilled".into(),
        Release::NotFound => {
            "no release found: slots are refilled with no barrier after their reads".into()
        }
    }
}

fn phases(list: &[PhaseKind]) -> String {
    list.iter()
        .map(|k| phase_name(*k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table under a diagram: the roles, every load and wait with its slot expression, and the
/// release, as (what, text) rows.
pub fn details(v: &PipelineView, p: &Pipeline) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let mut roles: Vec<usize> = p.loads.iter().map(|l| l.role).collect();
    roles.extend(p.waits.iter().map(|w| w.role));
    for (i, r) in roles.iter().enumerate() {
        if roles[..i].contains(r) {
            continue;
        }
        let role = &v.roles[*r];
        let regs = role
            .registers
            .map(|n| format!(", {n} registers"))
            .unwrap_or_default();
        rows.push(("role", format!("{}: {}{regs}", role.name, role.threads)));
    }
    for l in &p.loads {
        let what = match (&l.kind, &l.tensor_map) {
            (LoadKind::Tile, Some(map)) => format!("TMA {}-D tile through {map}", l.rank),
            (LoadKind::Tile, None) => format!("TMA {}-D tile", l.rank),
            (LoadKind::Bulk, _) => "bulk copy".to_string(),
        };
        let tx = l
            .expect_tx
            .map(|b| format!(", expect_tx {b} B"))
            .unwrap_or_default();
        let guard = l
            .guard
            .as_ref()
            .map(|g| format!(" if {g}"))
            .unwrap_or_default();
        rows.push((
            "load",
            format!(
                "{} issues {} → {}[{}] ({what}, {} B{tx}) on {}[{}]{guard}; in {}",
                v.roles[l.role].name,
                l.tensor,
                l.buffer,
                l.slot,
                l.bytes,
                p.full_barrier,
                l.slot,
                phases(&l.phases)
            ),
        ));
    }
    for w in &p.waits {
        rows.push((
            "wait",
            format!(
                "{} wait on {}[{}] for parity {}; in {}",
                v.roles[w.role].name,
                w.barrier,
                w.slot,
                w.parity,
                phases(&w.phases)
            ),
        ));
    }
    rows.push(("release", release_text(p)));
    rows
}

/// The whole pane as HTML: per pipeline a heading, the diagram and the details; for a kernel
/// without pipelines, [`NO_PIPELINE`].
pub fn html(v: &PipelineView) -> String {
    if v.pipelines.is_empty() {
        return format!(r#"<p class="note" id="no-pipeline">{NO_PIPELINE}</p>"#);
    }
    let mut out = String::new();
    for (i, p) in v.pipelines.iter().enumerate() {
        let _ = write!(
            out,
            r#"<section class="pipeline"><h3 class="mono">{}</h3><div class="pl-figure">{}</div><table class="kv">"#,
            esc(&summary(p)),
            svg(v, i)
        );
        for (what, text) in details(v, p) {
            let _ = write!(
                out,
                r#"<tr><th>{what}</th><td class="mono">{}</td></tr>"#,
                esc(&text)
            );
        }
        out.push_str("</table></section>");
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

/// A vertical arrow from `y0` to `y1` at `x` with a label on its right, at its top (the next
/// row's caption crosses its lower part).
fn arrow(out: &mut String, x: i64, y0: i64, y1: i64, marker: &str, label: &[String]) {
    let _ = write!(
        out,
        r#"<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" class="pl-arrow" marker-end="url(#{marker})"/>"#
    );
    text(out, x + 6, y0 + 14, "pl-small", "start", label);
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

/// The diagram of pipeline `index` of `view`: a column per slot; rows (each under a caption)
/// for the roles that issue loads, the slots, and the roles that only wait; then the release.
pub fn svg(view: &PipelineView, index: usize) -> String {
    let p = &view.pipelines[index];
    let stages = p.stages.max(1);
    let marker = format!("pl-head-{index}");
    let buffers = p.buffers.join(", ");
    let mut issuers: Vec<usize> = Vec::new();
    let mut waiters: Vec<usize> = Vec::new();
    for l in &p.loads {
        if !issuers.contains(&l.role) {
            issuers.push(l.role);
        }
    }
    for w in &p.waits {
        if !issuers.contains(&w.role) && !waiters.contains(&w.role) {
            waiters.push(w.role);
        }
    }
    // What a role does in slot `k`, as the lines of its box.
    let role_lines = |r: usize, k: i64| -> Vec<String> {
        let mut lines = Vec::new();
        for l in p.loads.iter().filter(|l| l.role == r) {
            lines.push(format!("load {} → {}[{k}]", l.tensor, l.buffer));
            lines.push(match l.kind {
                LoadKind::Tile => {
                    format!("TMA {}-D · {}", l.rank, crate::model::bytes(l.bytes as f64))
                }
                LoadKind::Bulk => format!("bulk · {}", crate::model::bytes(l.bytes as f64)),
            });
        }
        for w in p.waits.iter().filter(|w| w.role == r) {
            lines.push(format!("wait {}[{k}]", w.barrier));
            lines.push(format!("read {buffers}[{k}]"));
        }
        lines
    };
    let slot_lines = |k: i64| {
        let mut l = vec![
            format!("{buffers}[{k}]"),
            format!("{}[{k}]", p.full_barrier),
        ];
        if let Some(e) = &p.empty_barrier {
            l.push(format!("{e}[{k}]"));
        }
        l
    };
    let role_caption = |r: usize| {
        let role = &view.roles[r];
        let mut detail = role.threads.clone();
        if let Some(n) = role.registers {
            let _ = write!(detail, " · {n} registers");
        }
        for w in p.waits.iter().filter(|w| w.role == r) {
            let _ = write!(detail, " · wait parity {}", w.parity);
        }
        (role.name.clone(), detail)
    };
    let mut slot_detail = format!(
        "{buffers}: {stages} × {} · full barriers {}",
        crate::model::bytes(p.stage_bytes as f64),
        p.full_barrier
    );
    if let Some(e) = &p.empty_barrier {
        let _ = write!(slot_detail, " · empty barriers {e}");
    }
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

    // Every row: (caption, its y, the boxes' y and height). Each column is as wide as its
    // longest box line (about 7 px a character) plus room for the arrows.
    let longest = (0..stages)
        .flat_map(|k| {
            let mut l = slot_lines(k);
            for &r in issuers.iter().chain(&waiters) {
                l.extend(role_lines(r, k));
            }
            l
        })
        .map(|l| l.chars().count() as i64)
        .max()
        .unwrap_or(0);
    let box_w = (longest * 7 + 14).max(MIN_BOX_W);
    let col_w = box_w + COL_PAD;
    let mut captions: Vec<(String, String)> = Vec::new();
    let mut heights: Vec<i64> = Vec::new();
    for &r in &issuers {
        captions.push(role_caption(r));
        heights.push(role_lines(r, 0).len() as i64);
    }
    captions.push(("shared memory".into(), slot_detail));
    heights.push(slot_lines(0).len() as i64);
    for &r in &waiters {
        captions.push(role_caption(r));
        heights.push(role_lines(r, 0).len() as i64);
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
        .chain(std::iter::once(&("release".to_string(), release.clone())))
        .map(|(a, b)| (a.chars().count() + b.chars().count()) as i64 * 7 + 30)
        .max()
        .unwrap_or(0);
    let width = (stages * col_w + 10).max(caption_w);
    let x_start = (width - stages * col_w) / 2;
    let height = footer + 10;
    let slot_row = issuers.len();

    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="pl-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" style="min-width: {}px" role="img" aria-label="{}">"#,
        width * 4 / 5,
        esc(&summary(p))
    );
    let _ = write!(
        out,
        r#"<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="pl-head"/></marker></defs>"#
    );
    for k in 0..stages {
        let x0 = x_start + k * col_w;
        let cx = x0 + col_w / 2;
        let left = cx - box_w / 2;
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
        text(
            &mut out,
            cx,
            16,
            "pl-strong",
            "middle",
            &[format!("slot {k}")],
        );
        text(
            &mut out,
            cx,
            16 + LINE,
            "pl-small",
            "middle",
            &[iter, first.to_string()],
        );
        for (i, &r) in issuers.iter().enumerate() {
            let (_, by, bh) = rows[i];
            boxed(
                &mut out,
                (cx, box_w),
                by,
                bh,
                "pl-box pl-issue",
                &role_lines(r, k),
            );
        }
        let (_, sy, sh) = rows[slot_row];
        let _ = write!(out, r#"<g class="pl-slot" data-slot="{k}">"#);
        boxed(&mut out, (cx, box_w), sy, sh, "pl-slot-box", &slot_lines(k));
        out.push_str("</g>");
        for (i, &r) in waiters.iter().enumerate() {
            let (_, by, bh) = rows[slot_row + 1 + i];
            boxed(
                &mut out,
                (cx, box_w),
                by,
                bh,
                "pl-box pl-wait",
                &role_lines(r, k),
            );
        }
        // Issue: from the issuing row just above the slots; wait: into the first waiting row.
        if let Some(&r) = issuers.last() {
            let (_, by, bh) = rows[slot_row - 1];
            let tx: i64 = p
                .loads
                .iter()
                .filter(|l| l.role == r)
                .filter_map(|l| l.expect_tx)
                .sum();
            arrow(
                &mut out,
                left + 18,
                by + bh,
                sy - 2,
                &marker,
                &["issue".into(), format!("expect_tx {tx} B")],
            );
        }
        if !waiters.is_empty() {
            let (_, by, _) = rows[slot_row + 1];
            arrow(
                &mut out,
                left + 18,
                sy + sh,
                by - 2,
                &marker,
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
    // The captions last: their halo hides the arrows that cross them.
    for ((name, detail), (cy, ..)) in captions.iter().zip(&rows) {
        caption(&mut out, *cy, name, detail, "pl-small");
    }
    caption(&mut out, footer, "release", &release, release_class);
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str) -> PipelineView {
        crate::model::compile(crate::examples::find(name).unwrap().source)
            .unwrap()
            .pipeline
    }

    #[test]
    fn exp_2d_has_four_slots_and_its_roles() {
        let v = view("tma/exp_2d");
        let svg = svg(&v, 0);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches(r#"class="pl-slot""#).count(), 4, "{svg}");
        for k in 0..4 {
            assert!(svg.contains(&format!(r#"data-slot="{k}""#)));
            assert!(svg.contains(&format!(">slot {k}<")));
            assert!(svg.contains(&format!(">x_s_full[{k}]<")));
            assert!(svg.contains(&format!(">wait x_s_full[{k}]<")));
            assert!(svg.contains(&format!(">read x_s[{k}]<")));
        }
        assert!(svg.contains(">load x → x_s[3]<"));
        assert!(svg.contains(">TMA 2-D · 2.0 KiB<"));
        assert_eq!(svg.matches(">expect_tx 2048 B<").count(), 4);
        // Role captions; the condition's `&&` is escaped.
        assert!(svg.contains(
            ">producer</tspan><tspan dx=\"8\" class=\"pl-small\">1 thread: warp == 0 &amp;&amp; elect_one()<"
        ), "{svg}");
        assert!(svg.contains(
            ">consumers</tspan><tspan dx=\"8\" class=\"pl-small\">all 512 threads of the block (64 × 8) · wait parity n_o / 4 % 2<"
        ), "{svg}");
        assert!(svg.contains(">x_s: 4 × 2.0 KiB · full barriers x_s_full<"));
        assert!(!svg.contains("&&"));
        // Slots 0..3 are filled first by the prologue (3 ahead), slot 3 by the main loop.
        assert_eq!(svg.matches(">first: prologue<").count(), 3);
        assert_eq!(svg.matches(">first: main loop<").count(), 1);
        assert!(svg.contains(">__syncthreads() after the reads: refill with n_o + 4<"));
        assert_eq!(svg.matches("pl-release").count(), 4);
        assert_eq!(
            summary(&v.pipelines[0]),
            "x → x_s: 4 stages of 2.0 KiB, 3 loaded ahead, loop n_o: prologue (for n_o in 3) → \
             main (for n_o in ceilDiv(N, 64) - 3) → epilogue (for n_o_epi in 3)"
        );
    }

    #[test]
    fn a_bulk_copy_and_three_slots() {
        let v = view("tma/copy_1d_bulk");
        let svg = svg(&v, 0);
        assert_eq!(svg.matches(r#"class="pl-slot""#).count(), 3);
        assert!(svg.contains(">bulk · 1.0 KiB<"));
        assert!(svg.contains(">n_oi % 3 == 2<"));
        assert!(release_text(&v.pipelines[0]).starts_with("__syncthreads()"));
        let rows = details(&v, &v.pipelines[0]);
        let kinds: Vec<&str> = rows.iter().map(|r| r.0).collect();
        assert_eq!(kinds, ["role", "role", "load", "wait", "release"]);
        assert_eq!(rows[0].1, "producer: 1 thread: warp == 0 && elect_one()");
        assert_eq!(rows[1].1, "consumers: all 256 threads of the block");
        assert_eq!(
            rows[2].1,
            "producer issues x → x_s[(n_oi + 2) % 3] (bulk copy, 1024 B, expect_tx 1024 B) on \
             x_s_full[(n_oi + 2) % 3] if (n_oo * 16 + (n_oi + 2)) * 256 < N; in prologue, main"
        );
        assert_eq!(
            rows[3].1,
            "consumers wait on x_s_full[n_oi % 3] for parity n_oi / 3 % 2; in main, epilogue"
        );
    }

    #[test]
    fn the_pane_holds_a_section_per_pipeline_or_says_there_is_none() {
        let v = view("tma/exp_2d");
        let page = html(&v);
        assert_eq!(page.matches("<section").count(), 1);
        assert!(page.contains(&svg(&v, 0)));
        assert!(page.contains("<th>load</th>") && page.contains("<th>release</th>"));
        // Conditions are escaped in the table too.
        assert!(page.contains("1 thread: warp == 0 &amp;&amp; elect_one()"));
        let none = html(&view("basics/softmax"));
        assert_eq!(
            none,
            r#"<p class="note" id="no-pipeline">no pipeline: this kernel has no TMA / circular-buffered loads</p>"#
        );
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("a < b && \"c\" > d"),
            "a &lt; b &amp;&amp; &quot;c&quot; &gt; d"
        );
    }
}
