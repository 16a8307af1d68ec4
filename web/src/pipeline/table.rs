//! The pane's text: the one-line summary, the details table and the HTML around the diagram
//! (what each role issues, waits on and releases, the tensor cores, the staged epilogue).

use super::*;

pub(super) fn phase_name(k: PhaseKind) -> &'static str {
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

pub(super) fn phases(list: &[PhaseKind]) -> String {
    list.iter()
        .map(|k| phase_name(*k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pipeline whose stages a product reads (the full barrier it waits on, else its operands').
pub(super) fn pipeline_of(m: &Mma) -> Option<usize> {
    m.stage
        .as_ref()
        .map(|s| s.pipeline)
        .or(m.a.pipeline)
        .or(m.b.pipeline)
}

pub(super) fn major(m: Major) -> &'static str {
    match m {
        Major::KMajor => "K-major",
        Major::MnMajor => "MN-major",
    }
}

/// `4 × wgmma m64n256k16.bf16` (the wgmmas of one commit group of one warp group); `ir`: as
/// the kernel IR spells the instruction (`wgmma.m64n256k16.f32.bf16`).
pub(super) fn mma_issue(m: &Mma, ir: bool) -> String {
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
pub(super) fn wg_coords(m: &Mma, wg: i64) -> Option<Vec<i64>> {
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
pub(super) fn wg_part(m: &Mma, wg: i64) -> (Option<String>, Option<String>) {
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
pub(super) fn wg_condition(m: &Mma, wg: i64) -> Option<String> {
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
pub(super) fn mma_details(v: &PipelineView, m: &Mma) -> Vec<(&'static str, String)> {
    let role = &v.roles[m.role];
    let operand = |name: &str, o: &hopfuse::backend::pipeline_view::MmaInput| {
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
        if let Some(t) = super::overlap::turns_text(v, m) {
            let _ = write!(groups, "; {t}");
        }
        rows.push(("warp groups", groups));
    }
    if let Some(t) = super::overlap::in_flight_text(v, m) {
        rows.push(("in flight", t));
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
    if let Some(t) = &v.tiles {
        let indices: Vec<String> = t
            .indices
            .iter()
            .map(|(var, axis, _)| format!("{var} ({axis})"))
            .collect();
        let split = if t.stream_k {
            "; stream-K: whole rounds, then the k steps of the tiles left split evenly (the piece ending a tile adds the others' sums)"
        } else {
            ""
        };
        rows.push((
            "tile order",
            format!(
                "persistent: CTA b of gridDim.x takes tiles b, b + gridDim.x, … of the {} (loop {}, producer and consumers alike); grouped raster: groups of {} along {}, stepping along {} first → {}{split}",
                t.tiles, t.var, t.group, t.along, t.along, indices.join(", ")
            ),
        ));
    }
    if let Some([x, y, z]) = v.cluster {
        rows.push((
            "cluster",
            format!(
                "{x} × {y} × {z} CTAs (__cluster_dims__): they meet at a cluster barrier after the mbarrier init and before exit"
            ),
        ));
    }
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
        let what = match l.multicast {
            Some(n) => format!("{what}, multicast: its slice to the same slot of all {n} CTAs of the cluster, each CTA issuing one"),
            None => what,
        };
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
pub(super) fn staged_of(v: &PipelineView, index: usize) -> Option<&StagedEpilogue> {
    v.staged.iter().find(|s| {
        v.mmas
            .iter()
            .any(|m| pipeline_of(m) == Some(index) && m.accumulator.buffer == s.accumulator)
    })
}

pub(super) fn count(n: Option<i64>) -> String {
    n.map(|n| format!("{n} × ")).unwrap_or_default()
}

/// `s_acc → 16 × stmatrix.x4 per warp → c_s (64.0 KiB)`: the writes of a staged cache.
pub(super) fn staged_writes(s: &StagedEpilogue) -> String {
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
pub(super) fn staged_rows(v: &PipelineView, index: usize) -> Vec<(&'static str, String)> {
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

pub(super) fn table(out: &mut String, rows: &[(&'static str, String)]) {
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
