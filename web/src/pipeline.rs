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
//! against the consumers' loops. Built as text, so it
//! is tested natively; colours are the page's CSS variables (`.pl-*` in style.css), so it
//! follows the light and dark themes.

use hopfuse::pipeline_view::{
    Level, LoadKind, Major, Mma, PhaseKind, Pipeline, PipelineView, Release, StagedEpilogue,
    StoreWaitAt,
};
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

/// The pipeline whose stages a product reads (the full barrier it waits on, else its operands').
fn pipeline_of(m: &Mma) -> Option<usize> {
    m.stage
        .as_ref()
        .map(|s| s.pipeline)
        .or(m.a.pipeline)
        .or(m.b.pipeline)
}

fn major(m: Major) -> &'static str {
    match m {
        Major::KMajor => "K-major",
        Major::MnMajor => "MN-major",
    }
}

/// `4 × wgmma m64n256k16.bf16` (the wgmmas of one commit group of one warp group); `ir`: as
/// the kernel IR spells the instruction (`wgmma.m64n256k16.f32.bf16`).
fn mma_issue(m: &Mma, ir: bool) -> String {
    let count = m.per_group.map(|n| format!("{n} × ")).unwrap_or_default();
    if ir {
        format!(
            "{count}wgmma.{}.{}.{}",
            m.shape, m.accumulator.dtype, m.input
        )
    } else {
        format!("{count}wgmma {}.{}", m.shape, m.input)
    }
}

/// The position of warp group `wg` along the product's warp-group axes (the first outermost).
fn wg_coords(m: &Mma, wg: i64) -> Option<Vec<i64>> {
    let mut rest = wg;
    let mut out = vec![0; m.warp_group_axes.len()];
    for (i, a) in m.warp_group_axes.iter().enumerate().rev() {
        let e = a.extent.filter(|&e| e > 0)?;
        out[i] = rest % e;
        rest /= e;
    }
    Some(out)
}

/// Which part of the operands warp group `wg` multiplies: `rows 64–127` of A when one axis
/// moves A (M split over warp groups), `cols …` of B when it moves B, else the axes' values.
fn wg_part(m: &Mma, wg: i64) -> (Option<String>, Option<String>) {
    let Some(coords) = wg_coords(m, wg) else {
        return (None, None);
    };
    match (&m.warp_group_axes[..], &coords[..]) {
        ([a], [c]) if a.operands.len() == 1 && a.operands[0] == "A" => (
            Some(format!("rows {}–{}", c * m.m, (c + 1) * m.m - 1)),
            None,
        ),
        ([a], [c]) if a.operands.len() == 1 && a.operands[0] == "B" => (
            None,
            Some(format!("cols {}–{}", c * m.n, (c + 1) * m.n - 1)),
        ),
        ([], _) => (None, None),
        (axes, coords) => {
            let at: Vec<String> = axes
                .iter()
                .zip(coords)
                .map(|(a, c)| format!("{} = {c}", a.var))
                .collect();
            (Some(at.join(", ")), None)
        }
    }
}

/// The thread condition of warp group `wg` (`threadIdx.y == 1`), when it has axes.
fn wg_condition(m: &Mma, wg: i64) -> Option<String> {
    let coords = wg_coords(m, wg)?;
    let parts: Vec<String> = m
        .warp_group_axes
        .iter()
        .zip(coords)
        .map(|(a, c)| format!("{} == {c}", a.thread))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" && "))
}

/// The rows of the table about one product.
fn mma_details(v: &PipelineView, m: &Mma) -> Vec<(&'static str, String)> {
    let role = &v.roles[m.role];
    let operand = |name: &str, o: &hopfuse::pipeline_view::MmaInput| {
        let from = o
            .tensor
            .as_ref()
            .map(|t| format!(" (from {t})"))
            .unwrap_or_default();
        format!(
            "{name} = {}[{}]{from}, {}, swizzle {} B",
            o.buffer,
            o.tile,
            major(o.major),
            o.swizzle
        )
    };
    let mut issue = format!(
        "{} issue{} {} per {}",
        role.name,
        if m.warp_groups == Some(1) { "s" } else { "" },
        mma_issue(m, true),
        m.loop_var
            .as_deref()
            .map(|v| format!("{v} iteration"))
            .unwrap_or_else(|| "commit group".into())
    );
    if let Some(s) = &m.stage {
        let _ = write!(issue, " after waiting on {}[{}]", s.barrier, s.slot);
    }
    let _ = write!(issue, ": {}; {}", operand("A", &m.a), operand("B", &m.b));
    let mut sync = Vec::new();
    if m.fence {
        sync.push("wgmma.fence".to_string());
    }
    sync.push("commit_group".into());
    if let Some(n) = m.wait_group {
        sync.push(format!("wait_group {n}"));
    }
    let _ = write!(issue, "; {}", sync.join(", "));
    if let Some(r) = &m.release {
        let who = if r.per_warp {
            " (lane 0 of each warp)"
        } else {
            ""
        };
        let _ = write!(issue, "; then arrive on {}[{}]{who}", r.barrier, r.slot);
    }
    if !m.phases.is_empty() {
        let _ = write!(issue, "; in {}", phases(&m.phases));
    }
    let mut rows = vec![("wgmma", issue)];
    if let Some(n) = m.warp_groups {
        let mut groups = format!("{n} × 128 threads");
        for a in &m.warp_group_axes {
            let extent = a.extent.map(|e| format!(" ({e})")).unwrap_or_default();
            let moves = if a.operands.is_empty() {
                String::new()
            } else {
                format!(
                    ": each warp group its own tile of {}",
                    a.operands.join(" and ")
                )
            };
            let _ = write!(groups, "; {} = {}{extent}{moves}", a.var, a.thread);
        }
        rows.push(("warp groups", groups));
    }
    let acc = &m.accumulator;
    let mut text = format!(
        "{}: {} {} registers per thread (m{} × n{} / 128 threads), a {} × {} tile per warp group",
        acc.buffer, acc.registers, acc.dtype, m.m, m.n, m.m, m.n
    );
    if let Some(n) = acc.allocated.filter(|&n| n != acc.registers) {
        let _ = write!(
            text,
            "; {n} registers allocated, this one from [{}]",
            acc.index
        );
    }
    if let Some(f) = &acc.started {
        let _ = write!(
            text,
            "; scale-d from {f} (the first wgmma overwrites: no zero fill)"
        );
    }
    rows.push(("accumulator", text));
    if let Some(e) = &m.epilogue {
        let outputs = if e.outputs.is_empty() {
            String::new()
        } else {
            format!(" → {}", e.outputs.join(", "))
        };
        rows.push((
            "epilogue",
            format!(
                "for {} in {}: the {} registers of {}{outputs}",
                e.var, e.extent, acc.registers, acc.buffer
            ),
        ));
    }
    rows
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
                "{} issues {} → {}[{}] ({what}, {}{} B{tx}) on {}[{}]{guard}; in {}",
                v.roles[l.role].name,
                l.tensor,
                l.buffer,
                l.slot,
                boxes(l.boxes),
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
    let index = v.pipelines.iter().position(|q| q == p);
    for m in v
        .mmas
        .iter()
        .filter(|m| index.is_some() && pipeline_of(m) == index)
    {
        rows.extend(mma_details(v, m));
    }
    if let Some(i) = index {
        rows.extend(staged_rows(v, i));
    }
    rows
}

/// The staged epilogue whose accumulator a product of pipeline `index` fills.
fn staged_of(v: &PipelineView, index: usize) -> Option<&StagedEpilogue> {
    v.staged.iter().find(|s| {
        v.mmas
            .iter()
            .any(|m| pipeline_of(m) == Some(index) && m.accumulator.buffer == s.accumulator)
    })
}

fn count(n: Option<i64>) -> String {
    n.map(|n| format!("{n} × ")).unwrap_or_default()
}

/// `s_acc → 16 × stmatrix.x4 per warp → c_s (64.0 KiB)`: the writes of a staged cache.
fn staged_writes(s: &StagedEpilogue) -> String {
    let size = s
        .cache_bytes
        .map(|b| format!(" ({})", crate::model::bytes(b as f64)))
        .unwrap_or_default();
    format!(
        "{} → {}stmatrix.x4 per warp → {}{size}",
        s.accumulator,
        count(s.stmatrix),
        s.cache
    )
}

/// Rows about the loops of pipeline `index` (the producer's against the consumers') and the
/// store path of its accumulator; the table's and the diagram's footers.
fn staged_rows(v: &PipelineView, index: usize) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let s = staged_of(v, index);
    let levels = |l: &[Level]| {
        l.iter()
            .map(|l| format!("{} in {}", l.var, l.extent))
            .collect::<Vec<_>>()
            .join(" → ")
    };
    for n in v.nests.iter().filter(|n| n.pipeline == index) {
        let flat = if n.producer.len() == 1 && n.consumers.len() > 1 {
            "one loop over (tile, k): "
        } else {
            ""
        };
        rows.push(("producer loop", format!("{flat}{}", levels(&n.producer))));
        let mut c = levels(&n.consumers);
        if let Some(t) = s.and_then(|s| s.tile_loop.as_ref()) {
            let _ = write!(c, ", then the epilogue per {t}");
        }
        rows.push(("consumer loops", c));
    }
    let Some(s) = s else { return rows };
    let mut path = staged_writes(s);
    for (on, what) in [(s.fence, "fence.proxy.async"), (s.barrier, "barrier")] {
        if on {
            let _ = write!(path, " → {what}");
        }
    }
    let _ = write!(
        path,
        " → {}: {}TMA store of {} through {} → {}, {}commit",
        s.issuer.as_deref().unwrap_or("every thread"),
        count(s.boxes),
        crate::model::bytes(s.box_bytes as f64),
        s.tensor_map,
        s.tensor,
        count(s.commits)
    );
    if let Some(t) = &s.tile_loop {
        let _ = write!(path, " per {t}");
    }
    rows.push(("store", path));
    let waits: Vec<String> = s
        .waits
        .iter()
        .map(|w| {
            let at = match w.at {
                StoreWaitAt::BeforeRewrite => format!(
                    "before {} is written again (the stores overlap the next tile's main loop)",
                    s.cache
                ),
                StoreWaitAt::AfterStores => "right after the stores".into(),
                StoreWaitAt::Exit => "at exit".into(),
            };
            format!("wait_group.read {} {at}", w.pending)
        })
        .collect();
    if !waits.is_empty() {
        rows.push(("store wait", waits.join("; ")));
    }
    rows
}

fn table(out: &mut String, rows: &[(&'static str, String)]) {
    out.push_str(r#"<table class="kv">"#);
    for (what, text) in rows {
        let _ = write!(
            out,
            r#"<tr><th>{what}</th><td class="mono">{}</td></tr>"#,
            esc(text)
        );
    }
    out.push_str("</table>");
}

/// The whole pane as HTML: per pipeline a heading, the diagram and the details; for a kernel
/// without pipelines, [`NO_PIPELINE`].
pub fn html(v: &PipelineView) -> String {
    let mut out = String::new();
    if v.pipelines.is_empty() {
        let _ = write!(out, r#"<p class="note" id="no-pipeline">{NO_PIPELINE}</p>"#);
    }
    for (i, p) in v.pipelines.iter().enumerate() {
        let _ = write!(
            out,
            r#"<section class="pipeline"><h3 class="mono">{}</h3><div class="pl-figure">{}</div>"#,
            esc(&summary(p)),
            svg(v, i)
        );
        table(&mut out, &details(v, p));
        out.push_str("</section>");
    }
    // Products whose operands no pipeline loads: their table alone.
    for m in v.mmas.iter().filter(|m| pipeline_of(m).is_none()) {
        let _ = write!(
            out,
            r#"<section class="pipeline"><h3 class="mono">{}</h3>"#,
            esc(&mma_issue(m, true))
        );
        table(&mut out, &mma_details(v, m));
        out.push_str("</section>");
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
    let p = &view.pipelines[index];
    let stages = p.stages.max(1);
    let marker = format!("pl-head-{index}");
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
    // What a role does in slot `k`, as the lines of its box.
    let role_lines = |lane: Lane, k: i64| -> Vec<String> {
        let r = lane.role;
        let mut lines = Vec::new();
        for l in p.loads.iter().filter(|l| l.role == r) {
            lines.push(format!("load {} → {}[{k}]", l.tensor, l.buffer));
            lines.push(match l.kind {
                LoadKind::Tile => format!(
                    "TMA {}-D · {}{}",
                    l.rank,
                    boxes(l.boxes),
                    crate::model::bytes(l.bytes as f64)
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
    };
    // A warp group's accumulators (the last column), as the lines of its box.
    let acc_lines = |lane: Lane| -> Vec<String> {
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
    let role_caption = |lane: Lane| {
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
    footers.extend(
        staged_rows(view, index)
            .into_iter()
            .map(|(a, b)| (a.to_string(), b, "pl-small")),
    );
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
            let mut l = slot_lines(k);
            for &r in &issuers {
                l.extend(role_lines(Lane { role: r, wg: None }, k));
            }
            for &lane in &lanes {
                l.extend(role_lines(lane, k));
            }
            char_w(&l)
        })
        .max()
        .unwrap_or(0);
    let box_w = (longest * 7 + 14).max(MIN_BOX_W);
    let col_w = box_w + COL_PAD;
    let acc_rows: Vec<usize> = (0..lanes.len())
        .filter(|&i| !acc_lines(lanes[i]).is_empty())
        .collect();
    let acc_w = if acc_rows.is_empty() {
        0
    } else {
        let lines: Vec<String> = lanes.iter().flat_map(|&l| acc_lines(l)).collect();
        (char_w(&lines) * 7 + 14).max(MIN_BOX_W)
    };
    let acc_col = if acc_w > 0 { ACC_GAP + acc_w + 14 } else { 0 };
    let st_w = (char_w(&st_lines) * 7 + 14).max(MIN_BOX_W);
    let acc_col = acc_col
        + if st_lines.is_empty() {
            0
        } else {
            ACC_GAP + st_w
        };
    let mut captions: Vec<(String, String)> = Vec::new();
    let mut heights: Vec<i64> = Vec::new();
    for &r in &issuers {
        captions.push(role_caption(Lane { role: r, wg: None }));
        heights.push(role_lines(Lane { role: r, wg: None }, 0).len() as i64);
    }
    captions.push(("shared memory".into(), slot_detail));
    heights.push(slot_lines(0).len() as i64);
    for &lane in &lanes {
        captions.push(role_caption(lane));
        heights.push((role_lines(lane, 0).len().max(acc_lines(lane).len())) as i64);
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
        column_head(
            &mut out,
            cx,
            &format!("slot {k}"),
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
                &role_lines(Lane { role: r, wg: None }, k),
            );
        }
        let (_, sy, sh) = rows[slot_row];
        let _ = write!(out, r#"<g class="pl-slot" data-slot="{k}">"#);
        boxed(&mut out, (cx, box_w), sy, sh, "pl-slot-box", &slot_lines(k));
        out.push_str("</g>");
        for (i, &lane) in lanes.iter().enumerate() {
            let (_, by, bh) = rows[slot_row + 1 + i];
            let mma = mmas.iter().any(|m| m.role == lane.role);
            let class = if mma {
                "pl-box pl-wait pl-mma"
            } else {
                "pl-box pl-wait"
            };
            boxed(&mut out, (cx, box_w), by, bh, class, &role_lines(lane, k));
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
                &mut out,
                left + 18,
                by + bh,
                sy - 2,
                &marker,
                &["issue".into(), format!("expect_tx {tx} B")],
            );
        }
        if !lanes.is_empty() {
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
    // The accumulators: a column of register boxes, one per warp group, fed by the last slot.
    if acc_w > 0 {
        let x0 = x_start + stages * col_w;
        let cx = x0 + ACC_GAP + acc_w / 2;
        let _ = write!(
            out,
            r#"<line x1="{x0}" y1="4" x2="{x0}" y2="{}" class="pl-grid"/>"#,
            footer - 18
        );
        column_head(
            &mut out,
            cx,
            "accumulator",
            &["registers".into(), "every slot adds in".into()],
        );
        let from = x0 - COL_PAD / 2;
        for &i in &acc_rows {
            let (_, by, bh) = rows[slot_row + 1 + i];
            let _ = write!(out, r#"<g class="pl-acc" data-lane="{i}">"#);
            boxed(
                &mut out,
                (cx, acc_w),
                by,
                bh,
                "pl-box pl-acc-box",
                &acc_lines(lanes[i]),
            );
            out.push_str("</g>");
            // Low in the box: clear of the full barrier's path into the next warp group.
            let mid = by + bh - 12;
            h_arrow(&mut out, from, cx - acc_w / 2, mid, &marker, "(+)=");
            if !st_lines.is_empty() {
                h_arrow(
                    &mut out,
                    cx + acc_w / 2,
                    cx + acc_w / 2 + ACC_GAP,
                    mid,
                    &marker,
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
                &mut out,
                sx,
                "store",
                &["shared cache".into(), "per tile".into()],
            );
            out.push_str(r#"<g class="pl-staged">"#);
            // Its lines in the first row: the next row's caption crosses the box lower down.
            boxed(&mut out, (sx, st_w), top, by + bh - top, "pl-slot-box", &[]);
            let (first, rest) = st_lines.split_at(1);
            text(&mut out, sx, top + 20, "pl-strong", "middle", first);
            text(&mut out, sx, top + 20 + LINE, "pl-small", "middle", rest);
            out.push_str("</g>");
        }
    }
    // The captions last: their halo hides the arrows that cross them.
    for ((name, detail), (cy, ..)) in captions.iter().zip(&rows) {
        caption(&mut out, *cy, name, detail, "pl-small");
    }
    for (i, (name, detail, class)) in footers.iter().enumerate() {
        caption(&mut out, footer + 20 * i as i64, name, detail, class);
    }
    out.push_str("</svg>");
    out
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
mod tests {
    use super::*;

    fn view(name: &str) -> PipelineView {
        crate::model::compile(crate::examples::source(
            &crate::examples::find(name).unwrap(),
        ))
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

    #[test]
    fn two_consumer_warp_groups_each_issue_wgmma_into_their_accumulator() {
        let v = view("matmul/step4_two_consumers");
        let svg = svg(&v, 0);
        // A row per warp group, each under its caption: its thread index, then the role's.
        for wg in 0..2 {
            assert!(svg.contains(&format!(
                ">consumer warp group {wg}</tspan><tspan dx=\"8\" class=\"pl-small\">threadIdx.y == {wg}, 128 of 256 threads: !(7 &lt; warp % 12) · 232 registers · wait parity k_o / 4 % 2<"
            )), "{svg}");
        }
        // Per slot and warp group: the wait, one commit group of four k16 steps on the slot's
        // operands (the warp group's 64 rows of A), its wait and the release.
        assert_eq!(svg.matches(">4 × wgmma m64n256k16.bf16<").count(), 8);
        assert_eq!(svg.matches(">commit · wait_group 1<").count(), 8);
        assert_eq!(svg.matches(r#"class="pl-box pl-wait pl-mma""#).count(), 8);
        for k in 0..4 {
            assert_eq!(svg.matches(&format!(">wait a_s_b_s_full[{k}]<")).count(), 2);
            assert!(svg.contains(&format!(">A a_s[{k}] rows 0–63 · K-major<")));
            assert!(svg.contains(&format!(">A a_s[{k}] rows 64–127 · K-major<")));
            assert_eq!(svg.matches(&format!(">B b_s[{k}] · K-major<")).count(), 2);
            assert_eq!(
                svg.matches(&format!(">arrive a_s_b_s_empty[{k}]<")).count(),
                2
            );
        }
        // The full barrier reaches the second warp group around each column's right side.
        let routes = svg
            .split("<path ")
            .skip(1)
            .filter(|p| {
                p.split('>')
                    .next()
                    .unwrap()
                    .contains(r#"class="pl-arrow" marker"#)
            })
            .count();
        assert_eq!(routes, 4, "{svg}");
        // The accumulators: a box per warp group, fed by the slots.
        assert_eq!(svg.matches(r#"class="pl-acc""#).count(), 2);
        assert_eq!(svg.matches(">s_acc[0..127]<").count(), 2);
        assert_eq!(svg.matches(">128 × f32 per thread<").count(), 2);
        assert_eq!(svg.matches(">64 × 256 tile<").count(), 2);
        assert_eq!(svg.matches(">(+)=<").count(), 2);
        assert!(svg.contains(">accumulator<"));
        assert!(svg.contains(">after the loop, for r_pair in 64: the 128 registers of s_acc → c<"));
        // One arrival announces both boxes of a stage: 48 KiB, not twice that.
        assert_eq!(svg.matches(">expect_tx 49152 B<").count(), 4, "{svg}");
        assert!(!svg.contains("&&&"));
    }

    #[test]
    fn the_table_says_what_the_tensor_cores_do() {
        let v = view("matmul/step4_two_consumers");
        let rows = details(&v, &v.pipelines[0]);
        let kinds: Vec<&str> = rows.iter().map(|r| r.0).collect();
        assert_eq!(
            kinds,
            [
                "role",
                "role",
                "load",
                "load",
                "wait",
                "release",
                "wgmma",
                "warp groups",
                "accumulator",
                "epilogue",
                "producer loop",
                "consumer loops"
            ]
        );
        // Not persistent: the consumers walk only the k loop, like the producer.
        assert_eq!(rows[10].1, "k_o in ceilDiv(K, 64)");
        assert_eq!(rows[11].1, "k_o in ceilDiv(K, 64)");
        assert_eq!(
            rows[6].1,
            "consumer warp groups issue 4 × wgmma.m64n256k16.f32.bf16 per k_o iteration after \
             waiting on a_s_b_s_full[k_o % 4]: A = a_s[k_o % 4 * 8192 + (m_io * 64 * 4 + k_io) * \
             16] (from a), K-major, swizzle 128 B; B = b_s[k_o % 4 * 16384 + k_io * 16] (from b), \
             K-major, swizzle 128 B; wgmma.fence, commit_group, wait_group 1; then arrive on \
             a_s_b_s_empty[(k_o - 1) % 4] (lane 0 of each warp); in consumer loop"
        );
        assert_eq!(
            rows[7].1,
            "2 × 128 threads; m_io = threadIdx.y (2): each warp group its own tile of A"
        );
        assert_eq!(
            rows[8].1,
            "s_acc: 128 f32 registers per thread (m64 × n256 / 128 threads), a 64 × 256 tile per \
             warp group; scale-d from s_acc_started[0] (the first wgmma overwrites: no zero fill)"
        );
        assert_eq!(
            rows[9].1,
            "for r_pair in 64: the 128 registers of s_acc → c"
        );
    }

    #[test]
    fn one_warp_group_has_one_row_and_mn_major_operands_say_so() {
        let v = view("matmul/step1_one_warp_group");
        let svg = svg(&v, 0);
        assert!(svg.contains(
            ">consumer warp group</tspan><tspan dx=\"8\" class=\"pl-small\">all 128 threads of the block · wait parity k_o % 2<"
        ), "{svg}");
        assert_eq!(svg.matches(">4 × wgmma m64n128k16.bf16<").count(), 1);
        assert!(svg.contains(">A a_s[0] · K-major<") && svg.contains(">B b_s[0] · K-major<"));
        assert!(
            !svg.contains(">arrive "),
            "no empty barrier: __syncthreads() releases"
        );
        assert_eq!(svg.matches(r#"class="pl-acc""#).count(), 1);
        assert!(svg.contains(">s_acc[0..63]<") && svg.contains(">scale-d: s_acc_started[0]<"));
        // Step 5: two consumer warp groups, each A its own atom; B four atoms side by side.
        let mn = svg_of(&view("matmul/step5_mn_major"));
        assert!(
            mn.contains(">A a_s[0] rows 64–127 · MN-major<")
                && mn.contains(">B b_s[3] · MN-major<"),
            "{mn}"
        );
        assert!(mn.contains(">128 × f32 per thread<"));
        assert!(mn.contains(">TMA 2-D · 2 × 8.0 KiB<") && mn.contains(">TMA 2-D · 4 × 8.0 KiB<"));
    }

    /// The seed kernel: the store column after the accumulators, the store path and its
    /// deferred wait, and the producer's flat loop against the consumers' nested loops.
    #[test]
    fn the_staged_epilogue_and_the_loops_are_drawn() {
        for name in [
            "matmul/step9_tma_store_epilogue",
            "matmul/step10_bias_gelu_tma_store",
        ] {
            let v = view(name);
            let svg = svg(&v, 0);
            assert_eq!(svg.matches(r#"class="pl-staged""#).count(), 1, "{svg}");
            for line in [
                ">store<",
                ">c_s · shared<",
                ">16 × stmatrix.x4 / warp<",
                ">4 × TMA store → c<",
                ">read-wait: next tile<",
            ] {
                assert!(svg.contains(line), "{name}: {line}");
            }
            // One stmatrix arrow per warp group, from its accumulator.
            assert_eq!(svg.matches(">st<").count(), 2);
            assert!(svg.contains(
                ">one loop over (tile, k): m_oi_n_oi_k_o in ceilDiv(ceilDiv(M, 128), 16) * \
                 (ceilDiv(ceilDiv(N, 256), 8) * ceilDiv(K, 64))<"
            ));
            assert!(svg.contains(
                ">m_oi in ceilDiv(ceilDiv(M, 128), 16) → n_oi in ceilDiv(ceilDiv(N, 256), 8) → \
                 k_o in ceilDiv(K, 64), then the epilogue per n_oi<"
            ));
            let rows = details(&v, &v.pipelines[0]);
            let row = |what: &str| &rows.iter().find(|r| r.0 == what).unwrap().1;
            assert_eq!(
                row("store"),
                "s_acc → 16 × stmatrix.x4 per warp → c_s (64.0 KiB) → fence.proxy.async → \
                 barrier → warp == 0 && elect_one(): 4 × TMA store of 16.0 KiB through c_map → \
                 c, 4 × commit per n_oi"
            );
            assert_eq!(
                row("store wait"),
                "wait_group.read 0 before c_s is written again (the stores overlap the next \
                 tile's main loop); wait_group.read 0 at exit"
            );
            // The footers say the same, escaped.
            assert!(svg.contains(">s_acc → 16 × stmatrix.x4 per warp → c_s (64.0 KiB) → fence.proxy.async → barrier → warp == 0 &amp;&amp; elect_one(): 4 × TMA store"));
        }
        // Without a staged epilogue: no store column, no store rows.
        let page = html(&view("matmul/step8_wide_k_tile"));
        assert!(!page.contains("pl-staged"), "{page}");
        assert!(!page.contains("stmatrix"), "{page}");
        assert!(!page.contains("<th>store</th>") && page.contains("<th>consumer loops</th>"));
    }

    fn svg_of(v: &PipelineView) -> String {
        svg(v, 0)
    }

    /// Every matmul example draws its wgmma and accumulators; kernels without tensor cores
    /// draw neither.
    #[test]
    fn every_matmul_example_draws_its_tensor_cores() {
        let mut n = 0;
        for e in crate::examples::ALL.iter().filter(|e| e.group == "matmul") {
            let v = view(&crate::examples::key(e));
            let page = html(&v);
            let groups = v.roles[v.mmas[0].role].warp_groups.unwrap();
            assert_eq!(
                page.matches(r#"class="pl-acc""#).count() as i64,
                groups,
                "{}",
                e.name
            );
            assert!(page.contains("<th>wgmma</th>") && page.contains("<th>accumulator</th>"));
            assert!(page.contains(&format!(" × wgmma {}.bf16<", v.mmas[0].shape)));
            n += 1;
        }
        assert!(n >= 7);
        let plain = html(&view("tma/exp_2d"));
        assert!(!plain.contains("wgmma") && !plain.contains("pl-acc"));
    }
}
